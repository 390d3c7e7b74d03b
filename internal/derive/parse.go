package derive

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/trainingjob-operator/trainingjob-operator/internal/text"
)

// The bounds of ParseSample: whatever rank 0 serves, one parse holds a line buffer, the known series and
// at most MaxCustomMetrics custom ones, never the answer's whole set of series (which the Prometheus
// library's parser built: 216 MiB of heap for 4 MiB of "a 1" lines).
const (
	// MaxSampleLineBytes is the longest line read; a longer one is skipped.
	MaxSampleLineBytes = 16 << 10
	// MaxSampleSeries is how many series lines are read; the rest of the answer is not.
	MaxSampleSeries = 10000
	// MaxCustomNameBytes bounds a custom series' name, the key of status.metrics.custom: a longer name is
	// cut (the CRD holds keys to it too).
	MaxCustomNameBytes = 64
	// maxTypedFamilies bounds the histogram and summary families remembered (their series are skipped).
	maxTypedFamilies = 256
)

// mean is a running mean of a series' finite values.
type mean struct {
	sum float64
	n   int
}

func (m *mean) add(v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		m.sum, m.n = m.sum+v, m.n+1
	}
}

// value returns the mean; false for none, or when the sum overflowed (1.7e308 twice is +Inf).
func (m mean) value() (float64, bool) {
	v := m.sum / float64(m.n)
	if m.n == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}

// ParseSample returns the sample a body in the Prometheus text format reports: the well-known series mapped
// to their fields, other single-valued series in Custom (the first MaxCustomMetrics names in sorted order,
// each cut to MaxCustomNameBytes); a series with several label sets is averaged over its finite values (for
// example DCGM's one series per GPU); histograms and summaries are skipped. It reads one line at a time and
// stops after MaxSampleSeries series; a line it cannot read is an error.
//
// The supervisor's trainingjob_output_metric family (SeriesOutputMetric) is read apart: each series'
// name label is a Custom name of its own, kept as it is when it is valid UTF-8 of at most
// MaxCustomNameBytes bytes without control characters, '"' or '\' (others are skipped, not cut). A
// series of the body named like one of those labels wins over it: the program's own figure is preferred.
func ParseSample(r io.Reader) (Sample, error) {
	p := sampleParser{known: map[string]*mean{}, custom: map[string]*mean{}, output: map[string]*mean{}, typed: map[string]bool{}}
	if err := p.read(r); err != nil {
		return Sample{}, fmt.Errorf("parsing rank 0's metrics: %w", err)
	}
	return p.sample(), nil
}

// sampleParser holds what ParseSample keeps while it reads.
type sampleParser struct {
	known  map[string]*mean
	custom map[string]*mean
	// output are trainingjob_output_metric's series by their name label, at most MaxCustomMetrics.
	output map[string]*mean
	// typed are the histogram and summary families declared, at most maxTypedFamilies.
	typed  map[string]bool
	format string
}

func (p *sampleParser) read(r io.Reader) error {
	br := bufio.NewReaderSize(r, 4096)
	series := 0
	for line := 1; series < MaxSampleSeries; line++ {
		b, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if b != nil {
			b = bytes.TrimSpace(b)
			switch {
			case len(b) == 0:
			case b[0] == '#':
				p.comment(b)
			default:
				series++
				if perr := p.series(b); perr != nil {
					return fmt.Errorf("line %d: %w", line, perr)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
	return nil
}

// readLine returns the next line without its newline; nil (and no error) for a line over
// MaxSampleLineBytes, whose bytes are skipped; io.EOF with the last line.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > MaxSampleLineBytes {
			line = nil
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil {
				return nil, err
			}
			return nil, nil
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			return line, err
		}
		return line[:len(line)-1], nil
	}
}

// comment reads a "# TYPE name histogram|summary" line; other comments are nothing.
func (p *sampleParser) comment(b []byte) {
	f := bytes.Fields(b[1:])
	if len(f) != 3 || string(f[0]) != "TYPE" || len(p.typed) >= maxTypedFamilies {
		return
	}
	if t := string(f[2]); t == "histogram" || t == "summary" {
		p.typed[string(f[1])] = true
	}
}

// series reads one "name{labels} value [timestamp]" line.
func (p *sampleParser) series(b []byte) error {
	name, kept, rest, err := splitSeries(b)
	if err != nil {
		return err
	}
	f := bytes.Fields(rest)
	if len(f) < 1 || len(f) > 2 {
		return fmt.Errorf("series %.64q: want a value and at most a timestamp", name)
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil {
		return fmt.Errorf("series %.64q: the value is not a number", name)
	}
	if p.histogramOrSummary(name) {
		return nil
	}
	if string(name) == SeriesOutputFormat && kept.format != "" && len(kept.format) <= 32 {
		p.format = kept.format
	}
	switch {
	case string(name) == SeriesOutputMetric:
		if kept.hasName && validOutputName(kept.name) {
			addBounded(p.output, kept.name, v)
		}
	case slices.Contains(knownSeries, string(name)) || string(name) == SeriesDCGMGPUUtil:
		m := p.known[string(name)]
		if m == nil {
			m = &mean{}
			p.known[string(name)] = m
		}
		m.add(v)
	case !runtimeSeries(string(name)) && utf8.Valid(name):
		addBounded(p.custom, text.Cut(string(name), MaxCustomNameBytes), v)
	}
	return nil
}

// addBounded adds a finite value of a custom series to c, keeping the MaxCustomMetrics smallest names: a
// name larger than all of them once there are that many never returns (those kept only get smaller).
func addBounded(c map[string]*mean, name string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if m := c[name]; m != nil {
		m.add(v)
		return
	}
	if len(c) >= MaxCustomMetrics {
		largest := ""
		for n := range c {
			largest = max(largest, n)
		}
		if name > largest {
			return
		}
		delete(c, largest)
	}
	m := &mean{}
	m.add(v)
	c[name] = m
}

// validOutputName reports whether a trainingjob_output_metric name label may be a key of
// status.metrics.custom as it is: 1 to MaxCustomNameBytes bytes of valid UTF-8, no control characters,
// '"' or '\'.
func validOutputName(name string) bool {
	if name == "" || len(name) > MaxCustomNameBytes || !utf8.ValidString(name) {
		return false
	}
	for _, r := range name {
		if unicode.IsControl(r) || r == '"' || r == '\\' {
			return false
		}
	}
	return true
}

// histogramOrSummary reports whether a series belongs to a family declared a histogram or a summary.
func (p *sampleParser) histogramOrSummary(name []byte) bool {
	if p.typed[string(name)] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := bytes.CutSuffix(name, []byte(suffix)); ok && p.typed[string(base)] {
			return true
		}
	}
	return false
}

// knownSeries are the series with a field of their own in a Sample.
var knownSeries = []string{SeriesEpoch, SeriesEpochsTotal, SeriesStep, SeriesStepsTotal, SeriesLoss, SeriesAccuracy,
	SeriesLearningRate, SeriesThroughput, SeriesGPUUtil, SeriesCheckpointSeconds, SeriesProgressRatio, SeriesOutputIdle}

func (p *sampleParser) sample() Sample {
	s := Sample{Custom: map[string]float64{}, Format: p.format}
	fields := []**float64{&s.Epoch, &s.TotalEpochs, &s.Step, &s.TotalSteps, &s.Loss, &s.Accuracy, &s.LearningRate,
		&s.Throughput, &s.GPUUtilization, &s.CheckpointSeconds, &s.Ratio, &s.OutputIdle}
	for i, name := range knownSeries {
		if m := p.known[name]; m != nil {
			if v, ok := m.value(); ok {
				*fields[i] = &v
			}
		}
	}
	if m := p.known[SeriesDCGMGPUUtil]; m != nil && s.GPUUtilization == nil {
		if v, ok := m.value(); ok {
			s.GPUUtilization = &v // rank 0's own figure wins over DCGM's
		}
	}
	for name, m := range p.custom {
		if v, ok := m.value(); ok {
			s.Custom[name] = v
		}
	}
	for name, m := range p.output {
		if _, own := p.custom[name]; own {
			continue // the program's own series of that name wins
		}
		if v, ok := m.value(); ok {
			s.Custom[name] = v
		}
	}
	trimCustom(s.Custom)
	return s
}

// trimCustom keeps the MaxCustomMetrics smallest names of c (the series' and the output metrics' together).
func trimCustom(c map[string]float64) {
	if len(c) <= MaxCustomMetrics {
		return
	}
	names := slices.Sorted(maps.Keys(c))
	for _, n := range names[MaxCustomMetrics:] {
		delete(c, n)
	}
}

// keptLabels are the values of the labels ParseSample reads: format (the supervisor's
// trainingjob_output_format) and name (its trainingjob_output_metric).
type keptLabels struct {
	format, name string
	hasName      bool
}

// splitSeries splits a series line into its name, the labels it keeps and what follows the labels. The
// name is the line's first word, or the first quoted string between the braces (the text format's UTF-8
// names).
func splitSeries(b []byte) (name []byte, kept keptLabels, rest []byte, err error) {
	i := 0
	for i < len(b) && nameByte(b[i], i == 0) {
		i++
	}
	name, rest = b[:i], b[i:]
	if len(rest) == 0 || rest[0] != '{' {
		if len(name) == 0 {
			return nil, keptLabels{}, nil, errors.New("a series line that starts with no name")
		}
		return name, keptLabels{}, rest, nil
	}
	labels, rest, err := splitLabels(rest[1:])
	if err != nil {
		return nil, keptLabels{}, nil, err
	}
	for _, l := range labels {
		switch {
		case l.name == "" && len(name) == 0:
			name = []byte(l.value)
		case l.name == "format":
			kept.format = l.value
		case l.name == "name":
			kept.name, kept.hasName = l.value, true
		}
	}
	if len(name) == 0 {
		return nil, keptLabels{}, nil, errors.New("a series with no name")
	}
	return name, kept, rest, nil
}

// nameByte reports whether c may be in a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
func nameByte(c byte, first bool) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
}

type label struct{ name, value string }

// splitLabels reads the labels after "{" up to "}": name="value" pairs (a name bare or quoted) and, in the
// UTF-8 form, a quoted metric name alone (name ""). Only the names format, name and "" keep their values.
func splitLabels(b []byte) (labels []label, rest []byte, err error) {
	for {
		b = bytes.TrimLeft(b, " \t")
		if len(b) > 0 && b[0] == '}' {
			return labels, b[1:], nil
		}
		var name string
		switch {
		case len(b) > 0 && b[0] == '"':
			var q string
			if q, b, err = quoted(b); err != nil {
				return nil, nil, err
			}
			name = q
		default:
			i := 0
			for i < len(b) && nameByte(b[i], i == 0) {
				i++
			}
			if i == 0 {
				return nil, nil, errors.New("a label set that does not close")
			}
			name, b = string(b[:i]), b[i:]
		}
		b = bytes.TrimLeft(b, " \t")
		if len(b) > 0 && b[0] == '=' {
			var v string
			if v, b, err = quoted(bytes.TrimLeft(b[1:], " \t")); err != nil {
				return nil, nil, err
			}
			if name == "format" || name == "name" {
				labels = append(labels, label{name, v})
			}
		} else if len(labels) == 0 || labels[0].name != "" {
			labels = append(labels, label{"", name})
		}
		b = bytes.TrimLeft(b, " \t")
		if len(b) > 0 && b[0] == ',' {
			b = b[1:]
		}
	}
}

// quoted reads a double-quoted string with the text format's escapes (\\, \", \n) and returns it and what
// follows.
func quoted(b []byte) (string, []byte, error) {
	if len(b) == 0 || b[0] != '"' {
		return "", nil, errors.New("a label value that is not quoted")
	}
	var out []byte
	for i := 1; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			return string(out), b[i+1:], nil
		case '\\':
			if i++; i == len(b) {
				return "", nil, errors.New("a label value that does not close")
			}
			if b[i] == 'n' {
				out = append(out, '\n')
			} else {
				out = append(out, b[i])
			}
		default:
			out = append(out, c)
		}
	}
	return "", nil, errors.New("a label value that does not close")
}
