# The oci engine's trampoline, x86-64 Linux, no libc: a held sandbox's first
# process (see Engine.Hold in hold.go). It says it is up with one byte on
# stdout, reads one frame from stdin into its buffer, chdirs and execs the
# program the frame names, so the program is the container's process
# exactly as in a cold run. On any failure it exits 127.
#
# The frame (frameOf in trampoline.go) holds absolute pointers into the
# buffer, which the ELF maps zeroed at frameBase:
#	[0]  total length L, frameHead <= L <= frameMax
#	[8]  path   [16] argv   [24] envp   [32] cwd   [40] unused
#	[48...] the strings and the two NULL-terminated pointer arrays
#
# This is raw code, not an executable: staticELF (sandbox_init.go) wraps it
# in a static ELF with the buffer. Regenerate trampolineAMD64 with
# `go generate ./engine/oci/`. The constants must match trampoline.go's.
	frameBase = 0x600000
	frameMax = 0x40000
	frameHead = 48

	.text
	.globl	_start
_start:	mov	$1, %eax		# write(1, &ready, 1)
	mov	$1, %edi
	lea	ready(%rip), %rsi
	mov	$1, %edx
	syscall
	cmp	$1, %rax
	jne	fail
	xor	%r12d, %r12d		# r12: bytes read so far
	mov	$8, %r13d		# r13: bytes wanted, first the length word
	mov	$frameBase, %r14d	# r14: the buffer
fill:	cmp	%r13, %r12
	jae	have
	xor	%eax, %eax		# read(0, r14+r12, r13-r12)
	xor	%edi, %edi
	lea	(%r14,%r12), %rsi
	mov	%r13, %rdx
	sub	%r12, %rdx
	syscall
	test	%rax, %rax		# an error or end of input before the whole frame
	jle	fail
	add	%rax, %r12
	jmp	fill
have:	cmp	$8, %r13		# the length word: now want the whole frame
	jne	run
	mov	(%r14), %r13
	cmp	$frameHead, %r13
	jb	fail
	cmp	$frameMax, %r13
	ja	fail
	jmp	fill
run:	mov	$80, %eax		# chdir(cwd)
	mov	32(%r14), %rdi
	syscall
	test	%rax, %rax
	jne	fail
	mov	$59, %eax		# execve(path, argv, envp): returns only on failure
	mov	8(%r14), %rdi
	mov	16(%r14), %rsi
	mov	24(%r14), %rdx
	syscall
fail:	mov	$231, %eax		# exit_group(127)
	mov	$127, %edi
	syscall

ready:	.byte	'\n'			# trampolineReady
