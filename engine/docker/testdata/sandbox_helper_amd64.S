# airlock's in-sandbox helper, x86-64 Linux, no libc. One file, three jobs:
#   helper            idle init: ignore SIGCHLD (the kernel reaps orphans), pause forever
#   helper x PROG...  exec wrapper: become a session leader, write its pid (4 bytes,
#                     native order) to stderr, execve PROG (searching PATH); as a shell,
#                     127 if it is not there, 126 if it is but cannot be executed
#   helper k          read a pid (4 bytes) from stdin, SIGKILL its process group until
#                     the group is gone; exit 0, or 2 on bad input, 3 if it will not go
#   The oci engine's idle init (engine/oci/testdata/init_amd64.S) reaps with wait4 instead of
#   leaving it to the kernel; both reap every orphan and sleep until killed.
	.text
	.globl _start
_start:
	mov	(%rsp), %rbx		# argc
	lea	8(%rsp), %r12		# argv
	lea	16(%rsp,%rbx,8), %r13	# envp
	cmp	$1, %rbx
	jle	init
	mov	8(%r12), %rax
	movzbl	(%rax), %eax
	cmp	$'x', %al
	je	wrap
	cmp	$'k', %al
	je	killer
bad:	mov	$2, %edi
exit:	mov	$231, %eax		# exit_group
	syscall

init:	mov	$13, %eax		# rt_sigaction(SIGCHLD, &ign, NULL, 8)
	mov	$17, %edi
	lea	ign(%rip), %rsi
	xor	%edx, %edx
	mov	$8, %r10d
	syscall
1:	mov	$34, %eax		# pause
	syscall
	jmp	1b

wrap:	cmp	$3, %rbx
	jl	bad
	xor	%r9d, %r9d		# 1 once an execve fails on a file that is there
	mov	$112, %eax		# setsid
	syscall
	test	%rax, %rax
	jns	2f
	mov	$109, %eax		# setpgid(0, 0): already a group leader
	xor	%edi, %edi
	xor	%esi, %esi
	syscall
2:	mov	$39, %eax		# getpid
	syscall
	push	%rax
	mov	$1, %eax		# write(2, &pid, 4)
	mov	$2, %edi
	mov	%rsp, %rsi
	mov	$4, %edx
	syscall
	pop	%rax
	lea	16(%r12), %r14		# the program's argv
	mov	(%r14), %r15		# its name
	mov	%r15, %rdi
3:	movzbl	(%rdi), %eax		# a name with a slash is a path
	test	%al, %al
	jz	search
	cmp	$'/', %al
	je	direct
	inc	%rdi
	jmp	3b
direct:	mov	$59, %eax		# execve(name, argv, envp)
	mov	%r15, %rdi
	mov	%r14, %rsi
	mov	%r13, %rdx
	syscall
	cmp	$-2, %rax		# ENOENT, ENOTDIR: not there
	je	fail
	cmp	$-20, %rax
	je	fail
	mov	$1, %r9d
	jmp	fail
search:	mov	%r13, %rcx		# PATH= from envp, else the default
4:	mov	(%rcx), %rsi
	test	%rsi, %rsi
	jz	5f
	cmpl	$0x48544150, (%rsi)	# "PATH"
	jne	6f
	cmpb	$'=', 4(%rsi)
	jne	6f
	lea	5(%rsi), %rbp
	jmp	walk0
6:	add	$8, %rcx
	jmp	4b
5:	lea	defpath(%rip), %rbp
walk0:	sub	$8192, %rsp		# the candidate path is built at rsp
	lea	8000(%rsp), %r8		# its end
walk:	mov	%rsp, %rdi
7:	movzbl	(%rbp), %eax		# copy the PATH entry
	test	%al, %al
	jz	8f
	cmp	$':', %al
	je	8f
	cmp	%r8, %rdi
	jae	fail
	mov	%al, (%rdi)
	inc	%rdi
	inc	%rbp
	jmp	7b
8:	cmp	%rsp, %rdi		# an empty entry is "."
	jne	9f
	movb	$'.', (%rdi)
	inc	%rdi
9:	movb	$'/', (%rdi)
	inc	%rdi
	mov	%r15, %rsi
10:	cmp	%r8, %rdi		# then "/" and the name, with its NUL
	jae	fail
	movzbl	(%rsi), %eax
	mov	%al, (%rdi)
	inc	%rdi
	inc	%rsi
	test	%al, %al
	jnz	10b
	mov	$59, %eax		# execve(candidate, argv, envp)
	mov	%rsp, %rdi
	mov	%r14, %rsi
	mov	%r13, %rdx
	syscall
	cmp	$-2, %rax		# ENOENT, ENOTDIR: not there
	je	16f
	cmp	$-20, %rax
	je	16f
	mov	$1, %r9d
16:	cmpb	$0, (%rbp)		# failed: the next entry, if any
	je	fail
	inc	%rbp
	jmp	walk
fail:	mov	$1, %eax		# "airlock: cannot execute NAME\n", exit 127 or 126
	mov	$2, %edi
	lea	msg(%rip), %rsi
	mov	$msglen, %edx
	syscall
	mov	%r15, %rsi
	xor	%edx, %edx
11:	cmpb	$0, (%rsi,%rdx)
	je	12f
	inc	%rdx
	jmp	11b
12:	mov	$1, %eax
	mov	$2, %edi
	syscall
	mov	$1, %eax
	mov	$2, %edi
	lea	nl(%rip), %rsi
	mov	$1, %edx
	syscall
	mov	$127, %edi
	sub	%r9d, %edi		# syscalls keep r9
	jmp	exit

killer:	push	$0
	xor	%eax, %eax		# read(0, &pid, 4)
	xor	%edi, %edi
	mov	%rsp, %rsi
	mov	$4, %edx
	syscall
	cmp	$4, %rax
	jne	bad
	movslq	(%rsp), %rbx
	cmp	$1, %rbx		# never the init, never everything
	jle	bad
	neg	%rbx
	mov	$2000, %r12d
13:	mov	$62, %eax		# kill(-pgid, SIGKILL)
	mov	%rbx, %rdi
	mov	$9, %esi
	syscall
	cmp	$-3, %rax		# ESRCH: the group is gone
	je	14f
	dec	%r12d
	jz	15f
	mov	$35, %eax		# nanosleep(1ms)
	lea	ms(%rip), %rdi
	xor	%esi, %esi
	syscall
	jmp	13b
14:	xor	%edi, %edi
	jmp	exit
15:	mov	$3, %edi
	jmp	exit

	.balign	8
ign:	.quad	1, 2, 0, 0		# SIG_IGN, SA_NOCLDWAIT
ms:	.quad	0, 1000000
defpath: .asciz	"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
msg:	.ascii	"airlock: cannot execute "
	msglen = . - msg
nl:	.ascii	"\n"
