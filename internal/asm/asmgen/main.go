// Command asmgen writes a Go byte array of machine code built from a .S
// source (see package asm). It runs from go:generate lines:
//
//	//go:generate go run github.com/airlock-sandbox/airlock/internal/asm/asmgen -src testdata/x.S -var x -o x_code.go
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/asm"
)

func main() {
	src := flag.String("src", "", "the assembler source")
	name := flag.String("var", "", "the Go variable to declare")
	out := flag.String("o", "", "the Go file to write")
	pkg := flag.String("pkg", os.Getenv("GOPACKAGE"), "the Go package (go generate sets $GOPACKAGE)")
	executable := flag.Bool("exec", false, "link a static executable rather than take the raw code")
	flag.Parse()
	if *src == "" || *name == "" || *out == "" || *pkg == "" {
		fmt.Fprintln(os.Stderr, "usage: asmgen -src FILE.S -var NAME -o FILE.go [-pkg PACKAGE] [-exec]")
		os.Exit(2)
	}
	kind := asm.Raw
	if *executable {
		kind = asm.Executable
	}
	code, err := asm.Build(context.Background(), *src, kind)
	if err == nil {
		var b []byte
		if b, err = asm.Go(*pkg, *name, *src, kind, code); err == nil {
			err = os.WriteFile(*out, b, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "asmgen:", err)
		os.Exit(1)
	}
}
