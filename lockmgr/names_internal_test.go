package lockmgr

import (
	"fmt"
	"sync"
	"testing"
)

// The name cache keeps a pair once it was packed three times running, never a
// bad name, and never allocates for callers whose names change every time.
func TestNameCache(t *testing.T) {
	t.Parallel()
	var c nameCache
	var scratch namePair
	pack := func(res, own string) *namePair {
		t.Helper()
		if p := c.lookup(res, own); p != nil {
			return p
		}
		p, err := c.pack(&scratch, res, own)
		if err != nil {
			t.Fatalf("pack(%q, %q): %v", res, own, err)
		}
		return p
	}
	if p := pack("r", "o"); p != &scratch || c.kept.Load() != nil {
		t.Fatal("a pair packed once is kept")
	}
	if pack("r", "o"); c.kept.Load() != nil {
		t.Fatal("a pair packed twice (an Acquire and its Release) is kept")
	}
	if pack("r", "o"); c.kept.Load() == nil {
		t.Fatal("a pair packed three times running is not kept")
	}
	kept := c.kept.Load()
	if p := pack("r", "o"); p != kept {
		t.Fatal("the kept pair is not used")
	}
	// Another pair in between: the kept one stays until another is asked
	// for twice running.
	if p := pack("r2", "o"); p != &scratch || p.res.s != "r2" || c.kept.Load() != kept {
		t.Fatal("a pair asked for once replaced the kept one")
	}
	for _, bad := range [][2]string{{"", "o"}, {"r", ""}, {"r\x00", "o"}, {"r", "o\n"}} {
		for range 2 {
			if _, err := c.pack(&scratch, bad[0], bad[1]); err == nil {
				t.Fatalf("pack(%q, %q): no error", bad[0], bad[1])
			}
			if c.lookup(bad[0], bad[1]) != nil {
				t.Fatalf("bad names %q, %q kept", bad[0], bad[1])
			}
		}
	}
	// The kept pair is the names packed, word for word.
	var want namePair
	if err := checkNames(&want.res, &want.own, "r", "o"); err != nil {
		t.Fatal(err)
	}
	if got := c.lookup("r", "o"); got == nil || *got != want {
		t.Fatalf("kept pair %+v, want %+v", got, want)
	}
}

// Goroutines sharing a Manager's cache, each with names of its own, always
// get their own names back (go test -race checks the publication).
func TestNameCacheConcurrent(t *testing.T) {
	t.Parallel()
	var c nameCache
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, own := fmt.Sprintf("r%d", g), fmt.Sprintf("o%d", g%2)
			var scratch namePair
			for range 2000 {
				p := c.lookup(res, own)
				if p == nil {
					var err error
					if p, err = c.pack(&scratch, res, own); err != nil {
						errs <- err
						return
					}
				}
				if p.res.s != res || p.own.s != own || p.res.w[0] != uint64(res[0])|uint64(res[1])<<8 {
					errs <- fmt.Errorf("goroutine %d got %q/%q", g, p.res.s, p.own.s)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A pair the cache keeps carries its resource's home entry for the
// Manager's table, which lookups then use instead of dividing; a key
// packed anew has none and is divided. Both give the same home.
func TestNameCacheHome(t *testing.T) {
	t.Parallel()
	for _, n := range []uint64{1, 7, 4096} {
		c := nameCache{n: n}
		tab := table{n: n}
		var scratch namePair
		for range 3 {
			if _, err := c.pack(&scratch, "resource", "owner"); err != nil {
				t.Fatal(err)
			}
		}
		kept := c.lookup("resource", "owner")
		if kept == nil {
			t.Fatal("the pair is not kept")
		}
		if scratch.res.home != 0 {
			t.Errorf("n=%d: a pair packed anew has home %d, want 0 (not computed)", n, scratch.res.home)
		}
		want := kept.res.hash % n
		if got := tab.homeOf(&kept.res); got != want {
			t.Errorf("n=%d: kept pair's home %d, want %d", n, got, want)
		}
		if got := tab.homeOf(&scratch.res); got != want {
			t.Errorf("n=%d: fresh key's home %d, want %d", n, got, want)
		}
		for d := range n {
			if tab.probeFrom(want, d) != tab.probe(kept.res.hash, d) {
				t.Fatalf("n=%d: probeFrom and probe differ at %d", n, d)
			}
		}
	}
}
