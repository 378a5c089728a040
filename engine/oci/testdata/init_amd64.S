# The oci engine's idle init, x86-64 Linux, no libc: a long-lived sandbox's
# PID 1. It reaps the orphans that execs leave to it and otherwise sleeps in
# the kernel. It needs nothing from the image (no sleep, no libc), so any
# image works; only a signal that kills it (SIGKILL) ends it.
#
# SIGCHLD is blocked so that it stays pending (an unblocked SIGCHLD at its
# default action is discarded) and rt_sigtimedwait wakes for it; each wake
# reaps every exited child with wait4(WNOHANG) before sleeping again.
#
# The docker engine's init (engine/docker/testdata/sandbox_helper_amd64.S)
# does the same job another way: it sets SIGCHLD to SIG_IGN with
# SA_NOCLDWAIT, so the kernel reaps its children at exit, and pause()s. Both
# leave no zombie behind and sleep until killed; this one also shows the
# exit briefly as a zombie, until it wakes.
#
# First it forks the spawner (`/.airlock-agent spawner`, see
# internal/agent/spawner.go), before SIGCHLD is blocked so that the child
# starts with no signal blocked: the programs of detached execs descend
# from it, and so from this init, and survive a checkpoint and restore,
# where gVisor kills what an exec started. Where no agent is bound (runc,
# or a sandbox made without one) the child's execve fails and it exits 127,
# reaped below like any orphan.
#
# This is raw code, not an executable: staticELF (sandbox_init.go) wraps it
# in a static ELF. Regenerate initAMD64 with `go generate ./engine/oci/`.
	.text
	.globl	_start
_start:	mov	$57, %eax		# fork()
	syscall
	test	%rax, %rax
	jnz	block			# the parent (or no child): go on as init
	xor	%edx, %edx		# execve(agent, [agent, "spawner", NULL], NULL)
	push	%rdx
	lea	spawner(%rip), %rax
	push	%rax
	lea	agent(%rip), %rdi
	push	%rdi
	mov	%rsp, %rsi
	mov	$59, %eax
	syscall
	mov	$127, %edi		# exit(127)
	mov	$60, %eax
	syscall
block:	mov	$14, %eax		# rt_sigprocmask(SIG_BLOCK, &set, NULL, 8)
	xor	%edi, %edi
	lea	set(%rip), %rsi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
reap:	mov	$61, %eax		# wait4(-1, NULL, WNOHANG, NULL)
	mov	$-1, %edi
	xor	%esi, %esi
	mov	$1, %edx
	xor	%r10d, %r10d
	syscall
	test	%rax, %rax		# a child reaped: look for the next
	jg	reap
	mov	$128, %eax		# rt_sigtimedwait(&set, NULL, NULL, 8)
	lea	set(%rip), %rdi
	xor	%esi, %esi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
	jmp	reap

set:	.quad	1 << (17 - 1)		# SIGCHLD (17)
agent:	.asciz	"/.airlock-agent"
spawner: .asciz	"spawner"
