package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// pflagInvalid matches pflag's message for a value its type cannot parse,
// so that flagError can say what the flag accepts instead of showing the
// parser's internals (strconv.ParseInt: parsing "abc": invalid syntax).
var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?--([\w-]+)" flag: `)

// accepts says what a flag of pflag type typ accepts, for error messages.
func accepts(typ string) string {
	switch typ {
	case "int", "int64", "int32":
		return "a whole number"
	case "uint", "uint64", "uint32":
		return "a whole number, 0 or more"
	case "bool":
		return "true or false"
	case "duration":
		return "a duration such as 250ms, 2s or 1m30s"
	case "seconds":
		return "a number of seconds (2, 0.5) or a duration (250ms, 1m30s), 0 or more"
	case "count":
		return "a count of 1 or more (2e6 is accepted)"
	case "size":
		return "a size in bytes, with an optional unit: KiB, MiB, GiB (64KiB, 1MiB)"
	}
	return "a " + typ
}

// flagError marks every flag parsing error as a usage error, worded as
// one line that names the flag and what it accepts.
func flagError(cmd *cobra.Command, err error) error {
	if m := pflagInvalid.FindStringSubmatch(err.Error()); m != nil {
		if f := cmd.Flags().Lookup(m[2]); f != nil {
			err = fmt.Errorf("--%s: %q is not %s", m[2], m[1], accepts(f.Value.Type()))
		}
	}
	return &usageError{cmd: cmd.CommandPath(), err: err}
}

// sizeValue is a flag of bytes that takes binary units: 4096, 64KiB, 1MiB,
// 2GiB (also K, M, G and KB, MB, GB as the same binary multiples). A
// negative number means "none", as the table sizes of create allow.
type sizeValue struct{ n *int64 }

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30},
	{"B", 1},
}

func (v sizeValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v sizeValue) Set(s string) error {
	num, mult := s, int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(strings.ToUpper(s), strings.ToUpper(u.suffix)) {
			num, mult = strings.TrimSpace(s[:len(s)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return fmt.Errorf("bad size %q", s)
	}
	*v.n = n * mult
	return nil
}

func (v sizeValue) Type() string { return "size" }
