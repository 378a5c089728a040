//go:build linux

#include "textflag.h"

// func int80(trap, a1, a2, a3, a4, a5 uintptr) (r uintptr)
//
// R8-R10 are zeroed so that a platform that takes int $0x80 for a 64-bit
// call (gVisor does) gets no stray arguments.
TEXT ·int80(SB),NOSPLIT,$0-56
	MOVQ	trap+0(FP), AX
	MOVQ	a1+8(FP), BX
	MOVQ	a2+16(FP), CX
	MOVQ	a3+24(FP), DX
	MOVQ	a4+32(FP), SI
	MOVQ	a5+40(FP), DI
	XORQ	R8, R8
	XORQ	R9, R9
	XORQ	R10, R10
	INT	$0x80
	MOVQ	AX, r+48(FP)
	RET
