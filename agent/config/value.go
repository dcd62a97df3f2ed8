package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/gocty"

	"github.com/nops-dev/nops/structs"
)

// value is one typed setting bound to a field of a configuration struct. Text
// forms come from flags and environment variables, expressions from config
// files. Every way in runs the same checks, so a value that is rejected on
// the command line is rejected in a file too.
type value interface {
	// parse stores the value given as text.
	parse(s string) error
	// decode stores the value of an HCL expression.
	decode(expr hcl.Expression) error
	// check validates the value currently stored.
	check() error
	// isBool reports whether the flag takes no argument.
	isBool() bool
	// String formats the value currently stored, for help text.
	String() string
}

// typed implements value for one Go type.
type typed[T any] struct {
	p *T
	// fromText converts the text form.
	fromText func(string) (T, error)
	// fromCty converts a decoded HCL value of type ctyType.
	fromCty func(cty.Value) (T, error)
	ctyType cty.Type
	// normalize, when set, canonicalizes a value before it is checked.
	normalize func(T) T
	// validate, when set, rejects bad values.
	validate func(T) error
	format   func(T) string
	boolean  bool
}

func (v *typed[T]) parse(s string) error {
	x, err := v.fromText(s)
	if err != nil {
		return err
	}
	return v.store(x)
}

func (v *typed[T]) decode(expr hcl.Expression) error {
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		return errors.New(diagDetails(diags))
	}
	if val.IsNull() {
		return errors.New("a value is required, not null")
	}
	val, err := convert.Convert(val, v.ctyType)
	if err != nil {
		return fmt.Errorf("%s required", v.ctyType.FriendlyName())
	}
	x, err := v.fromCty(val)
	if err != nil {
		return err
	}
	return v.store(x)
}

func (v *typed[T]) store(x T) error {
	if v.normalize != nil {
		x = v.normalize(x)
	}
	if v.validate != nil {
		if err := v.validate(x); err != nil {
			return err
		}
	}
	*v.p = x
	return nil
}

func (v *typed[T]) check() error {
	if v.validate == nil {
		return nil
	}
	return v.validate(*v.p)
}

func (v *typed[T]) isBool() bool { return v.boolean }

func (v *typed[T]) String() string { return v.format(*v.p) }

// diagDetails flattens diagnostics into one message without their ranges;
// the caller adds the range of the whole attribute.
func diagDetails(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		parts = append(parts, msg)
	}
	return strings.Join(parts, "; ")
}

func ctyString(v cty.Value) (string, error) {
	var s string
	err := gocty.FromCtyValue(v, &s)
	return s, err
}

func stringValue(p *string, validate func(string) error) value {
	return &typed[string]{
		p:        p,
		fromText: func(s string) (string, error) { return s, nil },
		fromCty:  ctyString,
		ctyType:  cty.String,
		validate: validate,
		format:   func(s string) string { return s },
	}
}

// wholeValue binds a whole number: parse reads its text form, format
// writes it, and what says, in the errors, what a valid one is.
func wholeValue[T int | uint64](p *T, validate func(T) error, parse func(string) (T, error), format func(T) string, what string) value {
	return &typed[T]{
		p: p,
		fromText: func(s string) (T, error) {
			n, err := parse(strings.TrimSpace(s))
			if err != nil {
				return 0, fmt.Errorf("invalid value %q: %s", s, what)
			}
			return n, nil
		},
		fromCty: func(v cty.Value) (T, error) {
			var n T
			if err := gocty.FromCtyValue(v, &n); err != nil {
				return 0, fmt.Errorf("invalid value %s: %s", v.AsBigFloat().Text('f', -1), what)
			}
			return n, nil
		},
		ctyType:  cty.Number,
		validate: validate,
		format:   format,
	}
}

func intValue(p *int, validate func(int) error) value {
	return wholeValue(p, validate, strconv.Atoi, strconv.Itoa, "not a whole number")
}

func uint64Value(p *uint64, validate func(uint64) error) value {
	parse := func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
	format := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return wholeValue(p, validate, parse, format, "not a whole number of at least 0")
}

func boolValue(p *bool) value {
	return &typed[bool]{
		p: p,
		fromText: func(s string) (bool, error) {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return false, fmt.Errorf("invalid value %q: must be true or false", s)
			}
			return b, nil
		},
		fromCty: func(v cty.Value) (bool, error) {
			var b bool
			err := gocty.FromCtyValue(v, &b)
			return b, err
		},
		ctyType: cty.Bool,
		format:  strconv.FormatBool,
		boolean: true,
	}
}

// durationValue holds a Go duration string ("30s", "5m", "1h30m") that must
// be positive.
func durationValue(p *time.Duration) value { return durationChecked(p, checkPositiveDuration) }

// durationOrOffValue holds a duration where 0 turns something off.
func durationOrOffValue(p *time.Duration) value { return durationChecked(p, checkDurationOrOff) }

func durationChecked(p *time.Duration, validate func(time.Duration) error) value {
	parse := func(s string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: use a Go duration such as 30s, 5m or 1h", s)
		}
		return d, nil
	}
	return &typed[time.Duration]{
		p:        p,
		fromText: parse,
		fromCty: func(v cty.Value) (time.Duration, error) {
			s, err := ctyString(v)
			if err != nil {
				return 0, err
			}
			return parse(s)
		},
		ctyType:  cty.String,
		validate: validate,
		format:   time.Duration.String,
	}
}

// listValue holds a list of strings: comma-separated as text, a list of
// strings in files.
func listValue(p *[]string, normalize func([]string) []string, validate func([]string) error) value {
	return &typed[[]string]{
		p:        p,
		fromText: func(s string) ([]string, error) { return structs.SplitList(s), nil },
		fromCty: func(v cty.Value) ([]string, error) {
			var l []string
			err := gocty.FromCtyValue(v, &l)
			return l, err
		},
		ctyType:   cty.List(cty.String),
		normalize: normalize,
		validate:  validate,
		format:    func(l []string) string { return strings.Join(l, ",") },
	}
}

func checkDurationOrOff(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("invalid duration %s: must not be negative (0 turns it off)", d)
	}
	return nil
}

func checkPositiveDuration(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("invalid duration %s: must be greater than zero", d)
	}
	return nil
}
