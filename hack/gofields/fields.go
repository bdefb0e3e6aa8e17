package main

import (
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// special lists the types with their own MarshalJSON/UnmarshalJSON, the Rust variant each maps
// to, and whether the type (or its pointer) has an IsZero method (which omitzero then uses).
var special = map[reflect.Type]struct {
	variant string
	isZero  bool
}{
	reflect.TypeOf(resource.Quantity{}):  {"Quantity", true},
	reflect.TypeOf(intstr.IntOrString{}): {"IntOrString", false},
	reflect.TypeOf(metav1.Time{}):        {"Time", true},
	reflect.TypeOf(metav1.MicroTime{}):   {"MicroTime", true},
	reflect.TypeOf(metav1.FieldsV1{}):    {"FieldsV1", false},
}

var (
	marshalerType     = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
	unmarshalerType   = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()
	textMarshalerType = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	textUnmarshaler   = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
	isZeroerType      = reflect.TypeOf((*interface{ IsZero() bool })(nil)).Elem()
)

type goField struct {
	name      string
	ty        reflect.Type
	omitEmpty bool
	omitZero  bool
	tagged    bool
	index     []int
}

// jsonFields is encoding/json's view of a struct: exported fields, json:"-" skipped, embedded
// structs without a json name flattened, name conflicts resolved by depth then by tag (a
// conflict that stays ambiguous drops the name, as Go does), in Go's index order.
func jsonFields(t reflect.Type) ([]goField, error) {
	type level struct {
		t     reflect.Type
		index []int
	}
	var all []goField
	current := []level{{t, nil}}
	for len(current) > 0 {
		var next []level
		for _, l := range current {
			for i := 0; i < l.t.NumField(); i++ {
				sf := l.t.Field(i)
				if sf.Anonymous {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						return nil, fmt.Errorf("%v: embedded pointer %v is not supported", t, ft)
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !validTag(name) {
					name = ""
				}
				index := append(append([]int{}, l.index...), i)
				if name == "" && sf.Anonymous && sf.Type.Kind() == reflect.Struct {
					if _, ok := special[sf.Type]; ok {
						return nil, fmt.Errorf("%v: embedded %v is not supported", t, sf.Type)
					}
					next = append(next, level{sf.Type, index})
					continue
				}
				f := goField{name: name, ty: sf.Type, tagged: name != "", index: index}
				if f.name == "" {
					f.name = sf.Name
				}
				for _, o := range strings.Split(opts, ",") {
					switch o {
					case "omitempty":
						f.omitEmpty = true
					case "omitzero":
						f.omitZero = true
					case "string":
						return nil, fmt.Errorf("%v.%s: the ,string option is not supported", t, sf.Name)
					}
				}
				for _, r := range f.name {
					if r >= unicode.MaxASCII {
						return nil, fmt.Errorf("%v.%s: non-ASCII json name", t, sf.Name)
					}
				}
				all = append(all, f)
			}
		}
		current = next
	}
	// Dominant field per name: the shallowest; among several at that depth, the one tagged.
	byName := map[string][]goField{}
	for _, f := range all {
		byName[f.name] = append(byName[f.name], f)
	}
	var out []goField
	for _, fs := range byName {
		min := len(fs[0].index)
		for _, f := range fs {
			if len(f.index) < min {
				min = len(f.index)
			}
		}
		var cands []goField
		for _, f := range fs {
			if len(f.index) == min {
				cands = append(cands, f)
			}
		}
		if len(cands) > 1 {
			var tagged []goField
			for _, f := range cands {
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
			cands = tagged
		}
		if len(cands) == 1 {
			out = append(out, cands[0])
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].index, out[j].index
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return len(a) < len(b)
	})
	return out, nil
}

func validTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}

type generator struct {
	structs  []reflect.Type          // in discovery order
	names    map[reflect.Type]string // struct -> Rust static name
	tys      map[string]string       // Ty static name -> initializer
	fieldsOf map[reflect.Type][]goField
}

func screaming(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) && i > 0 {
			prev := rune(s[i-1])
			nextLower := i+1 < len(s) && unicode.IsLower(rune(s[i+1]))
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

func (g *generator) structName(t reflect.Type) string {
	if n, ok := g.names[t]; ok {
		return n
	}
	n := screaming(t.Name())
	for _, other := range g.names {
		if other == n {
			pkg := t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:]
			n = screaming(pkg) + "_" + n
		}
	}
	g.names[t] = n
	g.structs = append(g.structs, t)
	return n
}

// ty returns the name of the Rust `Ty` static for t, declaring it (and what it needs).
func (g *generator) ty(t reflect.Type) (string, error) {
	var name, init string
	if s, ok := special[t]; ok {
		name, init = "T_"+screaming(s.variant), "Ty::"+s.variant
		if hasIsZero(t) != s.isZero {
			return "", fmt.Errorf("%v: IsZero method presence changed", t)
		}
	} else {
		if t.Kind() != reflect.Pointer && (t.Implements(marshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) ||
			t.Implements(textMarshalerType) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
			return "", fmt.Errorf("%v has a custom JSON or text encoding this table does not know", t)
		}
		switch t.Kind() {
		case reflect.String:
			name, init = "T_STRING", "Ty::String"
		case reflect.Bool:
			name, init = "T_BOOL", "Ty::Bool"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			bits := t.Bits()
			name, init = fmt.Sprintf("T_INT%d", bits), fmt.Sprintf("Ty::Int(%d)", bits)
		case reflect.Pointer, reflect.Slice, reflect.Map:
			if t.Kind() == reflect.Map && t.Key().Kind() != reflect.String {
				return "", fmt.Errorf("%v: only string-kind map keys are supported", t)
			}
			elem, err := g.ty(t.Elem())
			if err != nil {
				return "", err
			}
			variant := map[reflect.Kind]string{reflect.Pointer: "Ptr", reflect.Slice: "Slice", reflect.Map: "Map"}[t.Kind()]
			name = "T_" + strings.ToUpper(variant) + "_" + strings.TrimPrefix(elem, "T_")
			init = fmt.Sprintf("Ty::%s(&%s)", variant, elem)
		case reflect.Struct:
			if hasIsZero(t) {
				return "", fmt.Errorf("%v has an IsZero method this table does not model", t)
			}
			_, known := g.names[t]
			s := g.structName(t)
			name, init = "T_"+s, fmt.Sprintf("Ty::Struct(&%s)", s)
			if !known {
				fs, err := jsonFields(t)
				if err != nil {
					return "", err
				}
				g.fieldsOf[t] = fs
				for _, f := range fs {
					if _, err := g.ty(f.ty); err != nil {
						return "", fmt.Errorf("%v.%s: %w", t, f.name, err)
					}
				}
			}
		default:
			return "", fmt.Errorf("%v: kind %v is not supported", t, t.Kind())
		}
	}
	g.tys[name] = init
	return name, nil
}

func hasIsZero(t reflect.Type) bool {
	return t.Implements(isZeroerType) || reflect.PointerTo(t).Implements(isZeroerType)
}

func writeFields(w io.Writer) error {
	g := &generator{names: map[reflect.Type]string{}, tys: map[string]string{}, fieldsOf: map[reflect.Type][]goField{}}
	root := reflect.TypeOf(corev1.PodTemplateSpec{})
	rootTy, err := g.ty(root)
	if err != nil {
		return err
	}
	delete(g.tys, rootTy) // only fields refer to Ty statics
	used := map[string]bool{}
	for _, t := range g.structs {
		for _, f := range g.fieldsOf[t] {
			used[omitFlag(f)] = true
		}
	}
	var imports []string
	for _, f := range []string{"EMPTY", "EMPTY_ZERO", "Field", "NONE", "StructDef", "Ty", "ZERO"} {
		if used[f] || f == "Field" || f == "StructDef" || f == "Ty" {
			imports = append(imports, f)
		}
	}
	fmt.Fprintln(w, "// @generated by hack/gofields (`hack/generate.sh` runs it); do not edit.")
	fmt.Fprintln(w, "//")
	fmt.Fprintln(w, "// encoding/json's view of every struct reachable from k8s.io/api/core/v1.PodTemplateSpec")
	fmt.Fprintln(w, "// (k8s.io/api v0.36.3): fields in Go order, embedded structs flattened, json:\"-\" dropped.")
	fmt.Fprintln(w, "")
	fmt.Fprintf(w, "use crate::schema::{%s};\n", strings.Join(imports, ", "))
	for _, t := range g.structs {
		fmt.Fprintf(w, "\n/// `%s.%s`\npub static %s: StructDef = StructDef {\n    name: %q,\n    fields: &[\n", t.PkgPath(), t.Name(), g.names[t], t.Name())
		for _, f := range g.fieldsOf[t] {
			tyName, _ := g.ty(f.ty)
			fmt.Fprintf(w, "        Field::new(%q, &%s, %s),\n", f.name, tyName, omitFlag(f))
		}
		fmt.Fprintln(w, "    ],\n};")
	}
	fmt.Fprintln(w)
	var names []string
	for n := range g.tys {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "static %s: Ty = %s;\n", n, g.tys[n])
	}
	return nil
}

func omitFlag(f goField) string {
	return map[[2]bool]string{{false, false}: "NONE", {true, false}: "EMPTY", {false, true}: "ZERO", {true, true}: "EMPTY_ZERO"}[[2]bool{f.omitEmpty, f.omitZero}]
}
