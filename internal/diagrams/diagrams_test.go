package diagrams

import (
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/*.svg from the drawings")

// The committed pictures are what this package draws now, and well-formed
// XML.
func TestDiagrams(t *testing.T) {
	layoutSVG, err := SegmentLayout()
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]string{"segment-layout.svg": layoutSVG, "takeover.svg": Takeover()} {
		dec := xml.NewDecoder(strings.NewReader(got))
		for {
			_, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed XML: %v", name, err)
			}
		}
		path := filepath.Join("..", "..", "docs", name)
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./internal/diagrams -update)", err)
		}
		if string(want) != got {
			t.Errorf("docs/%s is out of date: run go test ./internal/diagrams -update", name)
		}
	}
}
