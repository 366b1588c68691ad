package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

// findRoot is the repository's root: the nearest directory at or above dir
// that holds go.mod and bench/Makefile.
func findRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) && fileExists(filepath.Join(d, "bench", "Makefile")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no shmlock checkout (go.mod and bench/Makefile) at or above %s", dir)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// build makes everything the matrix runs into bin: the C drivers (which
// must build), the Boost drivers (which may not: missing says why), shmctl
// and the placement probe. Commands and compiler output go to log.
func build(root, bin string, log io.Writer) (missing []string, err error) {
	run := func(dir string, args ...string) error {
		fmt.Fprintf(log, "%s\n", strings.Join(args, " "))
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
		return cmd.Run()
	}
	makeIn := filepath.Join(root, "bench")
	if err := run(makeIn, "make", "-s", "BIN="+bin, "c"); err != nil {
		return nil, fmt.Errorf("building the C drivers (make -C bench c): %w", err)
	}
	if err := run(makeIn, "make", "-s", "BIN="+bin, "cpp"); err != nil {
		fmt.Fprintln(log, "matrix: WARNING: the Boost drivers did not build; they are left out (see above)")
		missing = append(missing, "boost_mutex, boost_upgradable: make -C bench cpp failed (Boost headers missing?)")
	}
	for _, p := range [][2]string{{"shmctl", "./cmd/shmctl"}, {"linert", "./scripts/linert"}} {
		if err := run(root, "go", "build", "-o", filepath.Join(bin, p[0]), p[1]); err != nil {
			return nil, fmt.Errorf("building %s: %w", p[1], err)
		}
	}
	return missing, nil
}

// output runs a command and returns its output, trimmed, or "" if it
// fails.
func output(stdin string, args ...string) string {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func firstLine(args ...string) string {
	line, _, _ := strings.Cut(output("", args...), "\n")
	return line
}

func versions() Versions {
	// The preprocessor's last line is BOOST_LIB_VERSION expanded: "1_74".
	boost := output("#include <boost/version.hpp>\nBOOST_LIB_VERSION\n", "c++", "-E", "-P", "-x", "c++", "-")
	boost = strings.ReplaceAll(strings.Trim(lastLine(boost), `"`), "_", ".")
	return Versions{
		Go:    runtime.Version(),
		CC:    firstLine("cc", "--version"),
		CXX:   firstLine("c++", "--version"),
		Glibc: strings.TrimPrefix(firstLine("getconf", "GNU_LIBC_VERSION"), "glibc "),
		Boost: boost,
	}
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// commit describes the checkout: the commit, and "-dirty" if files differ.
func commit(root string) string {
	cmd := exec.Command("git", "describe", "--always", "--dirty", "--abbrev=12")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), LoadAvgStart: loadAvg()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			switch {
			case !ok:
			case k == "model name" && m.CPU == "":
				m.CPU = v
			case k == "flags" && !m.Virtual:
				m.Virtual = strings.Contains(" "+v+" ", " hypervisor ")
			}
		}
	}
	return m
}

// loadAvg is /proc/loadavg's first three fields; zeros if unreadable.
func loadAvg() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == len(l) {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}

// probe runs the placement probe once.
func probe(bin, before string, rounds int) Probe {
	p := Probe{Before: before}
	out, err := exec.Command(filepath.Join(bin, "linert"), "-n", strconv.Itoa(rounds)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
		}
		p.Error = err.Error()
		return p
	}
	// "452.1 ns per cache-line round trip between CPU 0 and CPU 1"
	f, _, _ := strings.Cut(string(out), " ")
	if p.Ns, err = strconv.ParseFloat(f, 64); err != nil {
		p.Error = fmt.Sprintf("unexpected output %q", out)
	}
	return p
}
