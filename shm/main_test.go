package shm_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shmlock/shmlock/internal/testproc"
	"github.com/shmlock/shmlock/layout"
	"github.com/shmlock/shmlock/shm"
)

func TestMain(m *testing.M) { testproc.Main(m, helpers) }

var helpers = map[string]func(args []string) int{
	"operator-lock": operatorLockHelper, // PATH: hold upgrade mutex 0's operator lock until killed
	"classic-lock":  classicLockHelper,  // PATH: print "held PID" or "free" for byte 0's classic record lock
	// open-tty: as a session leader without a controlling terminal, Open
	// a terminal (refused: not a regular file), then exit 0 if the process
	// still has no controlling terminal, 1 if the open gave it one, 2 on
	// any other failure, 3 if there are no pseudo-terminals to try.
	"open-tty": func(args []string) int {
		master, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Println("no pseudo-terminals:", err)
			return 3
		}
		defer unix.Close(master)
		if err := unix.IoctlSetPointerInt(master, unix.TIOCSPTLCK, 0); err != nil {
			fmt.Println("error", err)
			return 2
		}
		n, err := unix.IoctlGetInt(master, unix.TIOCGPTN)
		if err != nil {
			fmt.Println("error", err)
			return 2
		}
		if _, err := shm.Open("/dev/pts/"+strconv.Itoa(n), shm.Options{}); !errors.Is(err, shm.ErrNotRegular) {
			fmt.Println("error: Open of a terminal:", err)
			return 2
		}
		if fd, err := unix.Open("/dev/tty", unix.O_RDWR|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
			return 1
		}
		return 0
	},
	// race-create PATH START_UNIX_NANO: OpenOrCreate at START, print who made it.
	"race-create": func(args []string) int {
		start, _ := strconv.ParseInt(args[1], 10, 64)
		time.Sleep(time.Until(time.Unix(0, start)))
		seg, err := shm.OpenOrCreate(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer seg.Close()
		fmt.Println(seg.IsCreator(), seg.Header().Created.UnixNano())
		return 0
	},
	// claim-names PATH START NAME...: claim every name at START, print "name index".
	"claim-names": func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer seg.Close()
		start, _ := strconv.ParseInt(args[1], 10, 64)
		time.Sleep(time.Until(time.Unix(0, start)))
		for _, name := range args[2:] {
			i, err := seg.Claim(layout.KindOwnerSlots, name)
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
			fmt.Println(name, i)
		}
		return 0
	},
	// die-mid-claim PATH NAME: kill -9 itself after writing the claim, before publishing it.
	"die-mid-claim": func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			return 1
		}
		shm.SetTestHookBeforePublish(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		_, _ = seg.Claim(layout.KindOwnerSlots, args[1])
		return 3 // not reached
	},
	// die-between-steps PATH NAME claim|release|last-ref: with claim, claim
	// NAME and kill -9 itself between the claim's two counts; otherwise
	// claim NAME unhindered, then release it and kill -9 itself between the
	// release's two counts (release) or between taking the last reference
	// off and freeing the entry (last-ref).
	"die-between-steps": func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			return 1
		}
		die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) }
		if args[2] == "claim" {
			shm.SetTestHookBetweenSteps(die)
			_, _ = seg.Claim(layout.KindOwnerSlots, args[1])
			return 3 // not reached
		}
		i, err := seg.Claim(layout.KindOwnerSlots, args[1])
		if err != nil {
			return 1
		}
		if args[2] == "last-ref" {
			shm.SetTestHookLastRef(die)
		} else {
			shm.SetTestHookBetweenSteps(die)
		}
		_ = seg.Release(layout.KindOwnerSlots, i)
		return 3 // not reached
	},
	// die-freeing PATH: drop the dead processes' claims, and kill -9 itself
	// in the first free of an entry, between marking it free and
	// forgetting the records that name it.
	"die-freeing": func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			return 1
		}
		shm.SetTestHookFreeing(func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
		_, _ = seg.DropDeadClaims(false)
		return 3 // not reached: no entry was freed
	},
	// create-as PATH group|private: Create under umask 077, with GroupAccess
	// for group; print "ok" or the error.
	"create-as": func(args []string) int {
		syscall.Umask(0o077)
		seg, err := shm.Create(args[0], shm.Options{GroupAccess: args[1] == "group"})
		if err != nil {
			fmt.Println(err)
			return 1
		}
		fmt.Println("ok")
		_ = seg.Close()
		return 0
	},
	// claim-regions PATH START NAME:SIZE...: claim every data region at
	// START, print "name offset fresh".
	"claim-regions": claimRegionsHelper,
	// data-counter PATH START ITERS: from START, add 1 to the counter in
	// data region "counter" ITERS times under spinlock "counter".
	"data-counter": dataCounterHelper,
	// die-mid-region PATH NAME: kill -9 itself after writing a region's
	// entry, before publishing it.
	"die-mid-region": dieMidRegionHelper,
	// open-as PATH [group] [others] [readonly]: Open with those options and,
	// unless read-only, claim and release a name; print "ok" or the error.
	"open-as": openAsHelper,
	// create-full DIR: Create on a full tmpfs of its own on DIR.
	"create-full": createFullHelper,
	// map-limited OPEN_PATH CREATE_PATH: see mapLimitedHelper.
	"map-limited": mapLimitedHelper,
	// open-sparse DIR: Open a sparse segment on a full tmpfs of its own on DIR.
	"open-sparse": openSparseHelper,
	// echo-token PATH: wait for slot 0's token to be set, write token+1 to slot 1.
	"echo-token": func(args []string) int {
		seg, err := shm.Open(args[0], shm.Options{})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		defer seg.Close()
		in, _ := seg.Slot(0)
		out, _ := seg.Slot(1)
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if v := in.Token.Load(); v != 0 {
				out.Token.Store(v + 1)
				return 0
			}
		}
		return 2
	},
}
