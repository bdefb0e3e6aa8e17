// Command gofields writes the Go-derived tables of the twc-gocompat crate:
//
//	gofields fields      the JSON field table of every struct reachable from corev1.PodTemplateSpec (Rust)
//	gofields quantities  resource.Quantity parse + String() for a broad generated set (TSV)
//	gofields references  reference.Parse results for a list of image strings (TSV)
//	gofields templates   random PodTemplateSpec inputs and Go's json.Marshal of what Go decodes (JSON lines)
//
// hack/generate.sh runs it; every output is deterministic (fixed seeds, sorted walks).
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gofields fields|quantities|references|templates")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "fields":
		err = writeFields(os.Stdout)
	case "quantities":
		err = writeQuantities(os.Stdout)
	case "references":
		err = writeReferences(os.Stdout)
	case "templates":
		err = writeTemplates(os.Stdout)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gofields:", err)
		os.Exit(1)
	}
}
