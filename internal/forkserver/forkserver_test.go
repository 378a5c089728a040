package forkserver

import (
	"bufio"
	"errors"
	"strings"
	"testing"
)

func TestArgv(t *testing.T) {
	argv, err := Argv("python", []string{"numpy", "os.path", "_x1"})
	if err != nil {
		t.Fatal(err)
	}
	if !Is(argv) || len(argv) != 6 || argv[3] != "numpy" || strings.Join(Modules(argv), ",") != "numpy,os.path,_x1" {
		t.Errorf("Argv = %q", argv[3:])
	}
	for _, c := range []struct {
		lang    string
		modules []string
		want    string
	}{
		{"bash", nil, "only python has a fork server"},
		{"Python", nil, "only python"},
		{"python", []string{"numpy; import os"}, "not a Python module name"},
		{"python", []string{"-c"}, "not a Python module name"},
		{"python", []string{""}, "not a Python module name"},
		{"python", []string{"a..b"}, "not a Python module name"},
		{"python", []string{"1abc"}, "not a Python module name"},
	} {
		_, err := Argv(c.lang, c.modules)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Argv(%q, %q) = %v, want an error saying %q", c.lang, c.modules, err, c.want)
		}
	}
}

func TestIs(t *testing.T) {
	for _, warm := range [][]string{
		nil,
		{"python3", "-c", "import time; time.sleep(9)"},
		{"python3", "-c", Script + " "},
		{"python", "-c", Script},
		{"python3", "-B", Script},
	} {
		if Is(warm) || Modules(warm) != nil {
			t.Errorf("Is(%.40q) = true", warm)
		}
	}
}

// TestReadStatus feeds the client hostile and broken replies: only one
// well-formed status in range is taken.
func TestReadStatus(t *testing.T) {
	checkReplies(t, "readStatus", readStatus, []replyCase{
		{`{"exit":0}` + "\n", 0, ""},
		{`{"exit":3}` + "\n", 3, ""},
		{`{"exit":255}` + "\n", 255, ""},
		{`{"signal":9}` + "\n", 137, ""},
		{`{"signal":64}` + "\n", 192, ""},
		{"", 0, "without the job's status"},
		{`{"exit":0}`, 0, "without the job's status"},
		{`{"exit":256}` + "\n", 0, "no exit status"},
		{`{"exit":-1}` + "\n", 0, "no exit status"},
		{`{"signal":0}` + "\n", 0, "no exit status"},
		{`{"signal":65}` + "\n", 0, "no exit status"},
		{`{"exit":1,"signal":9}` + "\n", 0, "no exit status"},
		{`{}` + "\n", 0, "no exit status"},
		{`{"exit":1e9999}` + "\n", 0, "malformed"},
		{`{"exit":"1"}` + "\n", 0, "malformed"},
		{`{"exit":1,"x":2}` + "\n", 0, "malformed"},
		{`[1]` + "\n", 0, "malformed"},
		{`{"exit":1}{"exit":2}` + "\n", 0, "more than one"},
		{strings.Repeat(" ", MaxReply) + `{"exit":1}` + "\n", 0, "reading"},
		{strings.Repeat("x", 1<<20), 0, "reading"},
		{`{"pid":7,"exit":0}` + "\n", 0, "no exit status"},
	})
	if _, err := readStatus(replies(errReader{})); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("a broken connection: %v", err)
	}
}

// replyCase is one reply and what reading it gives: a value, or an error
// saying bad.
type replyCase struct {
	reply string
	want  int
	bad   string
}

func checkReplies(t *testing.T, name string, read func(*bufio.Reader) (int, error), cases []replyCase) {
	t.Helper()
	for _, c := range cases {
		got, err := read(replies(strings.NewReader(c.reply)))
		switch {
		case c.bad == "" && (err != nil || got != c.want):
			t.Errorf("%s(%.40q) = %d, %v; want %d", name, c.reply, got, err, c.want)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("%s(%.40q) = %d, %v; want an error saying %q", name, c.reply, got, err, c.bad)
		}
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reset") }

// TestReadPid: the first reply is a pid alone, in range; a status in its
// place (or anything else) is refused.
func TestReadPid(t *testing.T) {
	checkReplies(t, "readPid", readPid, []replyCase{
		{`{"pid":2}` + "\n", 2, ""},
		{`{"pid":4194304}` + "\n", 1 << 22, ""},
		{`{"pid":1}` + "\n", 0, "no pid"},
		{`{"pid":4194305}` + "\n", 0, "no pid"},
		{`{"exit":0}` + "\n", 0, "no pid"},
		{`{"pid":7,"exit":0}` + "\n", 0, "no pid"},
		{`{"pid":"7"}` + "\n", 0, "malformed"},
		{`{"pid":7}`, 0, "without the job's pid"},
		{strings.Repeat(" ", MaxReply) + `{"pid":7}` + "\n", 0, "reading"},
	})
	// The pid, then the status: a status line after the pid is read whole.
	r := replies(strings.NewReader(`{"pid":9}` + "\n" + `{"exit":4}` + "\n"))
	if pid, err := readPid(r); pid != 9 || err != nil {
		t.Fatalf("readPid = %d, %v", pid, err)
	}
	if code, err := readStatus(r); code != 4 || err != nil {
		t.Errorf("readStatus after the pid = %d, %v", code, err)
	}
}
