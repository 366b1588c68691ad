//go:build !linux

package proc

import (
	"errors"
	"fmt"
	"os"
)

// errNoProcFS is returned for everything that needs Linux's /proc.
var errNoProcFS = fmt.Errorf("proc: /proc: %w", errors.ErrUnsupported)

func readStat(uint32) (byte, uint64, error) { return 0, 0, errNoProcFS }

func groupRuns(uint32) bool { return true }

func self() Identity { return Identity{PID: uint32(os.Getpid())} }

func bootID() ([16]byte, error) { return [16]byte{}, errNoProcFS }

func bootTime() (int64, error) { return 0, errNoProcFS }

func pidNamespace() (uint64, error) { return 0, errNoProcFS }

func threadID() uint64 { return 0 }

// MappedBy needs /proc.
func MappedBy(dev, ino uint64) ([]int, error) { return nil, errNoProcFS }

// OpenedBy needs /proc.
func OpenedBy(dev, ino uint64) ([]int, error) { return nil, errNoProcFS }

// Users needs /proc.
func Users(dev, ino uint64) (mapped, opened []int, err error) { return nil, nil, errNoProcFS }

// OpenHere needs /proc; without it the file may be open.
func OpenHere(dev, ino uint64) bool { return true }

// Children needs /proc: none are known.
func Children() []int { return nil }

// ScanPIDNamespaces needs /proc: no process of another namespace can be
// judged.
func ScanPIDNamespaces() *PIDNamespaces {
	return failedScan(0, errNoProcFS)
}

func timeNamespace(int) (uint64, error) { return 0, errNoProcFS }

func viewedStart(int, uint32) (uint64, error) { return 0, errNoProcFS }
