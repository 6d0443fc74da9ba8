package profiles_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"atoll/profiles"
)

// base is a small valid profile; its kernels' values are distinct so that
// tests can mutate one field of one kernel by text replacement.
func base() *profiles.Profile {
	return &profiles.Profile{
		APIVersion: profiles.APIVersion,
		GPU:        "H100-SXM",
		Model:      "resnet50",
		Batch:      1,
		Phase:      profiles.PhaseInference,
		Source:     profiles.SourceMeasured,
		Device:     "NVIDIA H100 80GB HBM3, driver 580.65, sm 1980 MHz",
		Notes:      map[string]string{"command": "atoll profile resnet50 --batch 1", "a<b": "x&y"},
		Kernels: []profiles.Kernel{
			{
				Name: "stem", Kernel: "conv2d_bf16_64x64", Shape: "N=1 224x224x3 -> 112x112x64 k=7x7 s=2",
				Grid: [3]int{1, 196, 1}, Block: [3]int{128, 1, 1}, Registers: 96, SharedMem: 19456,
				DurationUs: 11.5, SpreadUs: 0.25, FLOPs: 236027904, Bytes: 1925760,
				ComputePct: 12.5, MemoryPct: 20.75, Class: profiles.ClassUnknown, SMsNeeded: 40,
				Scaling: []profiles.Point{{SMs: 33, DurationUs: 30.5}, {SMs: 132, DurationUs: 11.5}},
				Tags:    []string{"tensor"},
			},
			{
				Name: "layer2.0.conv1", Kernel: "conv2d_bf16_64x64",
				Grid: [3]int{2, 49, 1}, Block: [3]int{128, 1, 1}, Registers: 97, SharedMem: 19457,
				DurationUs: 7.25, FLOPs: 102760448, Bytes: 1000000,
				ComputePct: 61.5, MemoryPct: 30.25, Class: profiles.ClassCompute, SMsNeeded: 20,
			},
		},
	}
}

func baseText(t testing.TB) string {
	t.Helper()
	var buf bytes.Buffer
	if err := profiles.Write(&buf, base()); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// lineOf is the 1-based line of the first occurrence of marker in text.
func lineOf(t *testing.T, text, marker string) int {
	t.Helper()
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("marker %q not in input:\n%s", marker, text)
	}
	return strings.Count(text[:i], "\n") + 1
}

func TestRoundTrip(t *testing.T) {
	text := baseText(t)
	p, err := profiles.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatalf("Parse(Write(p)): %v\n%s", err, text)
	}
	if !reflect.DeepEqual(p, base()) {
		t.Errorf("round trip changed the profile:\n got %+v\nwant %+v", p, base())
	}
	var again bytes.Buffer
	if err := profiles.Write(&again, p); err != nil {
		t.Fatal(err)
	}
	if again.String() != text {
		t.Errorf("Write is not stable:\n%s\n---\n%s", text, again.String())
	}
	for _, want := range []string{`"grid": [1, 196, 1],`, `{"sms": 33, "durationUs": 30.5},`, `"a<b": "x&y"`, `"tags": ["tensor"]`} {
		if !strings.Contains(text, want) {
			t.Errorf("Write output lacks %s:\n%s", want, text)
		}
	}
}

// TestMalformed: each case mutates the valid text; the error must wrap the
// right sentinel, say what is wrong, and point at the line of marker.
func TestMalformed(t *testing.T) {
	k1 := `"name": "layer2.0.conv1"`
	for _, tc := range []struct {
		name   string
		old    string // replaced (first occurrence) by new; "" = input is new
		new    string
		marker string // the error's line is the line of this text in the mutated input ("" = no line check)
		want   string // substring of the message
		is     error
	}{
		{"negative duration", `"durationUs": 7.25`, `"durationUs": -3`, `"durationUs": -3`,
			`kernels[1] ("layer2.0.conv1").durationUs: must be > 0, got -3`, profiles.ErrInvalid},
		{"zero duration", `"durationUs": 7.25`, `"durationUs": 0`, `"durationUs": 0`, `durationUs: must be > 0, got 0`, profiles.ErrInvalid},
		{"version", `"atoll/v1"`, `"atoll/v2"`, `"atoll/v2"`, `apiVersion: "atoll/v2" is not supported`, profiles.ErrVersion},
		{"unknown gpu", `"H100-SXM"`, `"B200"`, `"B200"`, `gpu: unknown GPU "B200"; known:`, profiles.ErrInvalid},
		{"gpu not canonical", `"H100-SXM"`, `"nvidia h100"`, `"nvidia h100"`, `write "H100-SXM"`, profiles.ErrInvalid},
		{"empty model", `"model": "resnet50"`, `"model": ""`, `"model": ""`, `model: must be a zoo name`, profiles.ErrInvalid},
		{"batch zero", `"batch": 1`, `"batch": 0`, `"batch": 0`, `batch: must be in 1..`, profiles.ErrInvalid},
		{"phase", `"inference"`, `"serving"`, `"serving"`, `phase: must be "inference" or "training", got "serving"`, profiles.ErrInvalid},
		{"source", `"measured"`, `"guessed"`, `"guessed"`, `source: must be`, profiles.ErrInvalid},
		{"empty name", k1, `"name": ""`, `"name": ""`, `kernels[1].name: must not be empty`, profiles.ErrInvalid},
		{"empty kernel", `"kernel": "conv2d_bf16_64x64",
      "grid": [2`, `"kernel": "",
      "grid": [2`, `"kernel": ""`, `kernels[1] ("layer2.0.conv1").kernel: must not be empty`, profiles.ErrInvalid},
		{"grid zero", `"grid": [2, 49, 1]`, `"grid": [2, 0, 1]`, `"grid": [2, 0, 1]`, `grid[1]: must be in 1..65535, got 0`, profiles.ErrInvalid},
		{"grid y too big", `"grid": [2, 49, 1]`, `"grid": [2, 70000, 1]`, `"grid": [2, 70000`, `grid[1]: must be in 1..65535, got 70000`, profiles.ErrInvalid},
		{"grid short", `"grid": [2, 49, 1]`, `"grid": [2, 49]`, `"grid": [2, 49]`, `grid: want exactly 3 elements, got 2`, profiles.ErrInvalid},
		{"grid long", `"grid": [2, 49, 1]`, `"grid": [2, 49, 1, 1]`, `"grid": [2, 49, 1, 1]`, `grid: want exactly 3 elements, got more`, profiles.ErrInvalid},
		{"block threads", `"block": [128, 1, 1],
      "registers": 97`, `"block": [1024, 2, 1],
      "registers": 97`, `"block": [1024, 2, 1]`, `block: 2048 threads per block, H100-SXM allows at most 1024`, profiles.ErrInvalid},
		{"block z", `"block": [128, 1, 1],
      "registers": 97`, `"block": [1, 1, 65],
      "registers": 97`, `"block": [1, 1, 65]`, `block[2]: must be in 1..64, got 65`, profiles.ErrInvalid},
		{"registers", `"registers": 97`, `"registers": 256`, `"registers": 256`, `registers: must be in 0..255, got 256`, profiles.ErrInvalid},
		{"smem too big", `"sharedMem": 19457`, `"sharedMem": 300000`, `"sharedMem": 300000`, `sharedMem: 300000 bytes per block, H100-SXM allows at most 232448`, profiles.ErrInvalid},
		{"does not fit", `"block": [128, 1, 1],
      "registers": 97`, `"block": [1024, 1, 1],
      "registers": 255`, `"registers": 255`, `registers: the launch does not fit one SM of H100-SXM`, profiles.ErrInvalid},
		{"negative smem", `"sharedMem": 19457`, `"sharedMem": -1`, `"sharedMem": -1`, `sharedMem: must be >= 0, got -1`, profiles.ErrInvalid},
		{"negative flops", `"flops": 102760448`, `"flops": -1`, `"flops": -1`, `flops: must be >= 0`, profiles.ErrInvalid},
		{"negative bytes", `"bytes": 1000000`, `"bytes": -5`, `"bytes": -5`, `bytes: must be >= 0`, profiles.ErrInvalid},
		{"compute pct", `"computePct": 61.5`, `"computePct": 100.5`, `"computePct": 100.5`, `computePct: must be in [0,100], got 100.5`, profiles.ErrInvalid},
		{"memory pct", `"memoryPct": 30.25`, `"memoryPct": -0.5`, `"memoryPct": -0.5`, `memoryPct: must be in [0,100]`, profiles.ErrInvalid},
		{"class", `"class": "compute"`, `"class": "io"`, `"class": "io"`, `class: must be "compute", "memory" or "unknown", got "io"`, profiles.ErrInvalid},
		{"sms needed zero", `"smsNeeded": 20`, `"smsNeeded": 0`, `"smsNeeded": 0`, `smsNeeded: must be in 1..132`, profiles.ErrInvalid},
		{"sms needed big", `"smsNeeded": 20`, `"smsNeeded": 133`, `"smsNeeded": 133`, `smsNeeded: must be in 1..132`, profiles.ErrInvalid},
		{"scaling order", `{"sms": 33, "durationUs": 30.5}`, `{"sms": 140, "durationUs": 30.5}`, `{"sms": 140`, `kernels[0] ("stem").scaling[0].sms: must increase and be in 1..132`, profiles.ErrInvalid},
		{"scaling duration", `{"sms": 33, "durationUs": 30.5}`, `{"sms": 33, "durationUs": 0}`, `{"sms": 33, "durationUs": 0}`, `scaling[0].durationUs: must be > 0`, profiles.ErrInvalid},
		{"spread", `"spreadUs": 0.25`, `"spreadUs": -1`, `"spreadUs": -1`, `spreadUs: must be >= 0`, profiles.ErrInvalid},
		{"graph duration", `"spreadUs": 0.25`, `"spreadUs": 0.25, "graphUs": -2`, `"graphUs": -2`, `graphUs: must be >= 0, got -2`, profiles.ErrInvalid},
		{"empty tag", `"tags": ["tensor"]`, `"tags": [""]`, `"tags": [""]`, `tags[0]: must not be empty`, profiles.ErrInvalid},
		{"no kernels", "", `{"apiVersion": "atoll/v1", "gpu": "H100-SXM", "model": "m", "batch": 1, "phase": "inference", "source": "measured",
"kernels": []}`, `"kernels": []`, `kernels: a profile needs at least one kernel`, profiles.ErrInvalid},
		// Structure.
		{"unknown field", `"registers": 97`, `"registers": 97, "occupancy": 4`, `"occupancy"`, `kernels[1] ("layer2.0.conv1").occupancy: unknown field; kernels[1] has: name, kernel`, profiles.ErrInvalid},
		{"case mismatch", `"durationUs": 7.25`, `"durationUS": 7.25`, `"durationUS"`, `did you mean "durationUs"? keys are case-sensitive`, profiles.ErrInvalid},
		{"unknown top field", `"batch": 1,`, `"batch": 1, "seed": 4,`, `"seed"`, `seed: unknown field; a profile has: apiVersion, gpu`, profiles.ErrInvalid},
		{"duplicate", `"registers": 97`, `"registers": 97, "registers": 98`, `"registers": 98`, `registers: given twice`, profiles.ErrInvalid},
		{"missing", `"class": "compute",`, ``, `{
      "name": "layer2.0.conv1"`, `kernels[1] ("layer2.0.conv1").class: missing (required)`, profiles.ErrInvalid},
		{"null", `"registers": 97`, `"registers": null`, `"registers": null`, `registers: null is not allowed`, profiles.ErrInvalid},
		{"null kernels", "", `{"kernels": null}`, `null`, `kernels: null is not allowed`, profiles.ErrInvalid},
		{"string for number", `"durationUs": 7.25`, `"durationUs": "7.25"`, `"durationUs": "7.25"`, `durationUs: want a number, got string "7.25"`, profiles.ErrInvalid},
		{"float for int", `"registers": 97`, `"registers": 97.5`, `"registers": 97.5`, `registers: want an integer, got 97.5`, profiles.ErrInvalid},
		{"huge int", `"registers": 97`, `"registers": 1e3`, `"registers": 1e3`, `registers: want an integer, got 1e3`, profiles.ErrInvalid},
		{"overflow", `"flops": 102760448`, `"flops": 1e999`, `"flops": 1e999`, `flops: number 1e999 is out of range`, profiles.ErrInvalid},
		{"string for grid", `"grid": [2, 49, 1]`, `"grid": "2x49"`, `"grid": "2x49"`, `grid: want an array, got string "2x49"`, profiles.ErrInvalid},
		{"array for notes", `"notes": {`, `"notes": [], "x": {`, `"notes": []`, `notes: want an object, got an array`, profiles.ErrInvalid},
		{"top level array", "", `[1, 2]`, `[1, 2]`, `want an object, got an array`, profiles.ErrInvalid},
		{"syntax", `"batch": 1,`, `"batch": 1,,`, `,,`, `syntax error: invalid character ','`, profiles.ErrInvalid},
		{"truncated", "", `{"apiVersion": "atoll/v1",
"gpu": "H1`, `"gpu"`, `unexpected end of input`, profiles.ErrInvalid},
		{"empty", "", ``, ``, `unexpected end of input`, profiles.ErrInvalid},
		{"trailing", "", "", "", `unexpected data after the profile`, profiles.ErrInvalid},
		{"two documents", "", "", "", `unexpected data after the profile`, profiles.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := baseText(t)
			switch {
			case tc.name == "trailing":
				text += "x\n"
				tc.marker = "x\n"
			case tc.name == "two documents":
				text += text
			case tc.old == "":
				text = tc.new
			default:
				if !strings.Contains(text, tc.old) {
					t.Fatalf("base text lacks %q:\n%s", tc.old, text)
				}
				text = strings.Replace(text, tc.old, tc.new, 1)
			}
			p, err := profiles.Parse(strings.NewReader(text))
			if err == nil {
				t.Fatalf("accepted:\n%s\n%+v", text, p)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n  %v\nlacks\n  %s", err, tc.want)
			}
			var pe *profiles.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %T is not *profiles.Error", err)
			}
			if tc.marker != "" || tc.name == "two documents" {
				want := 1
				if tc.marker != "" {
					want = lineOf(t, text, tc.marker)
				} else {
					want = strings.Count(baseText(t), "\n") + 1
				}
				if pe.Line != want {
					t.Errorf("error on line %d, want %d: %v", pe.Line, want, err)
				}
				if !strings.HasPrefix(err.Error(), fmt.Sprintf("profiles: line %d", want)) {
					t.Errorf("message does not start with its line: %v", err)
				}
			}
		})
	}
}

// The brief's example, exactly.
func TestErrorFormat(t *testing.T) {
	text := strings.Replace(baseText(t), `"durationUs": 7.25`, `"durationUs": -3`, 1)
	_, err := profiles.Parse(strings.NewReader(text))
	want := fmt.Sprintf(`profiles: line %d: kernels[1] ("layer2.0.conv1").durationUs: must be > 0, got -3`, lineOf(t, text, `"durationUs": -3`))
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
}

func TestWriteRefusesInvalid(t *testing.T) {
	for name, mut := range map[string]func(p *profiles.Profile){
		"nan":      func(p *profiles.Profile) { p.Kernels[0].DurationUs = math.NaN() },
		"inf":      func(p *profiles.Profile) { p.Kernels[1].FLOPs = math.Inf(1) },
		"version":  func(p *profiles.Profile) { p.APIVersion = "" },
		"empty":    func(p *profiles.Profile) { p.Kernels = nil },
		"emptyKey": func(p *profiles.Profile) { p.Notes[""] = "x" },
	} {
		p := base()
		mut(p)
		var buf bytes.Buffer
		if err := profiles.Write(&buf, p); err == nil || buf.Len() != 0 {
			t.Errorf("%s: Write accepted an invalid profile (err %v, wrote %d bytes)", name, err, buf.Len())
		}
	}
	if err := profiles.Write(new(bytes.Buffer), nil); !errors.Is(err, profiles.ErrInvalid) {
		t.Errorf("Write(nil) = %v", err)
	}
}

func TestNormalizesEmptyCollections(t *testing.T) {
	text := strings.Replace(baseText(t), `"tags": ["tensor"]`, `"tags": [], "scaling": []`, 1)
	text = strings.Replace(text, `"scaling": [
        {"sms": 33, "durationUs": 30.5},
        {"sms": 132, "durationUs": 11.5}
      ],`, "", 1)
	p, err := profiles.Parse(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if p.Kernels[0].Tags != nil || p.Kernels[0].Scaling != nil {
		t.Errorf("empty collections not normalized to nil: %#v %#v", p.Kernels[0].Tags, p.Kernels[0].Scaling)
	}
}

func TestLoad(t *testing.T) {
	_, err := profiles.Load("testdata/does-not-exist.json")
	if err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	dir := t.TempDir()
	path := dir + "/bad.json"
	text := strings.Replace(baseText(t), `"class": "compute"`, `"class": "io"`, 1)
	if err := writeFile(path, text); err != nil {
		t.Fatal(err)
	}
	_, err = profiles.Load(path)
	if err == nil || !strings.Contains(err.Error(), "profiles: "+path+": line ") {
		t.Errorf("Load error does not name the file and line: %v", err)
	}
}

// A vendor kernel's launches must each fit an SM of the profile's GPU and
// share out the whole call's time; only a kernel tagged blas has them.
func TestValidateLaunches(t *testing.T) {
	good := []profiles.Launch{
		{Function: "atoll_im2col8", Grid: 600, Block: 256, Registers: 32, Share: 0.4},
		{Function: "nvjet_sm90", Grid: 132, Block: 384, Registers: 168, SharedMem: 200 << 10, Share: 0.6, ComputePct: 60, MemoryPct: 20},
	}
	vendor := func(p *profiles.Profile, ls []profiles.Launch) {
		p.Kernels[0].Tags = append(p.Kernels[0].Tags, profiles.TagBLAS)
		p.Kernels[0].Launches = ls
	}
	p := base()
	vendor(p, good)
	if err := p.Validate(); err != nil {
		t.Fatalf("good launches: %v", err)
	}
	with := func(f func(l *profiles.Launch)) []profiles.Launch {
		ls := append([]profiles.Launch(nil), good...)
		f(&ls[1])
		return ls
	}
	for name, c := range map[string]struct {
		mut  func(p *profiles.Profile)
		want string
	}{
		"untagged":    {func(p *profiles.Profile) { p.Kernels[0].Launches = good }, "launches"},
		"no function": {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.Function = " " })) }, "launches[1].function"},
		"no grid":     {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.Grid = 0 })) }, "launches[1].grid"},
		"huge block":  {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.Block = 2048 })) }, "launches[1].block"},
		"smem":        {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.SharedMem = 300 << 10 })) }, "launches[1].sharedMem"},
		"registers": {func(p *profiles.Profile) {
			vendor(p, with(func(l *profiles.Launch) { l.Block, l.Registers = 1024, 255 }))
		}, "launches[1].registers"},
		"no share":     {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.Share = 0 })) }, "launches[1].share"},
		"shares short": {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.Share = 0.5 })) }, "add up to"},
		"percent":      {func(p *profiles.Profile) { vendor(p, with(func(l *profiles.Launch) { l.MemoryPct = 101 })) }, "launches[1].memoryPct"},
	} {
		p := base()
		c.mut(p)
		err := p.Validate()
		if !errors.Is(err, profiles.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %s", name, err, c.want)
		}
	}
}
