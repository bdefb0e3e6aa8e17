// Command kstatus judges live objects the way Helm 4's --wait, Flux and the cli-utils status
// poller do: it reads Kubernetes objects as JSON on stdin (one object, a List, or a stream of
// objects) and prints, per object, one JSON line {"kind","name","status","message"} computed by
// sigs.k8s.io/cli-utils/pkg/kstatus/status. The project's tests run it on objects read from a
// real apiserver, so the verdict is the library's own, not a re-implementation.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kjson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type verdict struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err == io.EOF {
			return
		} else if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: reading an object: %v\n", err)
			os.Exit(2)
		}
		// Kubernetes' own JSON reading: whole numbers become int64, as the library expects.
		var obj map[string]interface{}
		if err := kjson.Unmarshal(raw, &obj); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: reading an object: %v\n", err)
			os.Exit(2)
		}
		objects := []map[string]interface{}{obj}
		if items, ok := obj["items"].([]interface{}); ok {
			objects = objects[:0]
			for _, item := range items {
				if m, ok := item.(map[string]interface{}); ok {
					objects = append(objects, m)
				}
			}
		}
		for _, o := range objects {
			u := &unstructured.Unstructured{Object: o}
			res, err := status.Compute(u)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kstatus: %s %s: %v\n", u.GetKind(), u.GetName(), err)
				os.Exit(1)
			}
			if err := out.Encode(verdict{u.GetKind(), u.GetName(), res.Status.String(), res.Message}); err != nil {
				os.Exit(1)
			}
		}
	}
}
