package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const templateCount = 40

var stringPieces = []string{
	"a", "worker", "<", ">", "&", "\u2028", "\u2029", "é", "✓", "日本", "\x01", "\x1f", "\b", "\f", "\n", "\r", "\t",
	"\"", "\\", "\x7f", " ", "/", "=", "{", "}", "0", "-", ".",
}

type filler struct {
	r          *rand.Rand
	quantities []string
}

func (f *filler) str() string {
	var b strings.Builder
	for n := f.r.Intn(5); n > 0; n-- {
		b.WriteString(stringPieces[f.r.Intn(len(stringPieces))])
	}
	return b.String()
}

func (f *filler) time() string {
	s := fmt.Sprintf("%04d-%02d-%02dT%02d:%02d:%02d", 1970+f.r.Intn(130), 1+f.r.Intn(12), 1+f.r.Intn(28), f.r.Intn(24), f.r.Intn(60), f.r.Intn(60))
	if f.r.Intn(2) == 0 {
		s += "." + randomDigits(f.r, 1+f.r.Intn(11))
	}
	switch f.r.Intn(3) {
	case 0:
		return s + "Z"
	case 1:
		return s + fmt.Sprintf("+%02d:%02d", f.r.Intn(24), f.r.Intn(60))
	default:
		return s + fmt.Sprintf("-%02d:%02d", f.r.Intn(24), f.r.Intn(60))
	}
}

// value is a random JSON value (as encoding/json would read it into an any) for Go type t.
func (f *filler) value(t reflect.Type, depth int) any {
	switch t {
	case reflect.TypeOf(resource.Quantity{}):
		if f.r.Intn(10) == 0 {
			return f.r.Intn(5000)
		}
		return f.quantities[f.r.Intn(len(f.quantities))]
	case reflect.TypeOf(intstr.IntOrString{}):
		if f.r.Intn(2) == 0 {
			return f.r.Int31n(70000) - 100
		}
		return f.str()
	case reflect.TypeOf(metav1.Time{}):
		return f.time()
	case reflect.TypeOf(metav1.FieldsV1{}):
		return map[string]any{"f:" + f.str(): map[string]any{}}
	}
	switch t.Kind() {
	case reflect.String:
		return f.str()
	case reflect.Bool:
		return f.r.Intn(2) == 0
	case reflect.Int32:
		return f.r.Int31n(2000) - 1000
	case reflect.Int64:
		if f.r.Intn(8) == 0 {
			return f.r.Int63()
		}
		return f.r.Int63n(2000) - 1000
	case reflect.Pointer:
		if f.r.Intn(10) == 0 {
			return nil
		}
		return f.value(t.Elem(), depth)
	case reflect.Slice:
		switch f.r.Intn(8) {
		case 0:
			return nil
		case 1, 2:
			return []any{}
		}
		var out []any
		for n := 1 + f.r.Intn(2); n > 0 && depth < 7; n-- {
			out = append(out, f.value(t.Elem(), depth+1))
		}
		if out == nil {
			return []any{}
		}
		return out
	case reflect.Map:
		switch f.r.Intn(8) {
		case 0:
			return nil
		case 1, 2:
			return map[string]any{}
		}
		out := map[string]any{}
		for n := 1 + f.r.Intn(3); n > 0; n-- {
			out[f.str()] = f.value(t.Elem(), depth+1)
		}
		return out
	case reflect.Struct:
		fields, err := jsonFields(t)
		if err != nil {
			panic(err)
		}
		p := 0.6
		if depth > 1 {
			p = 0.12
		}
		out := map[string]any{}
		for _, fl := range fields {
			if depth < 7 && f.r.Float64() < p {
				if f.r.Intn(20) == 0 {
					out[fl.name] = nil
				} else {
					out[fl.name] = f.value(fl.ty, depth+1)
				}
			}
		}
		if f.r.Intn(10) == 0 {
			out["unknownField"] = f.str()
		}
		return out
	}
	panic(fmt.Sprintf("no random value for %v", t))
}

// writeTemplates writes one JSON object per line: a random input (keys sorted, as Go writes
// maps) and Go's json.Marshal of the PodTemplateSpec json.Unmarshal makes of it.
func writeTemplates(w io.Writer) error {
	f := &filler{r: rand.New(rand.NewSource(7))}
	for _, q := range quantityInputs() {
		if _, err := resource.ParseQuantity(q); err == nil && strings.TrimSpace(q) == q {
			f.quantities = append(f.quantities, q)
		}
	}
	for i := 0; i < templateCount; i++ {
		input, err := json.Marshal(f.value(reflect.TypeOf(corev1.PodTemplateSpec{}), 0))
		if err != nil {
			return err
		}
		var tpl corev1.PodTemplateSpec
		if err := json.Unmarshal(input, &tpl); err != nil {
			return fmt.Errorf("template %d: %w", i, err)
		}
		out, err := json.Marshal(tpl)
		if err != nil {
			return err
		}
		line, err := json.Marshal(struct {
			Input json.RawMessage `json:"input"`
			Go    string          `json:"go"`
		}{input, string(out)})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s\n", line)
	}
	return nil
}
