package schedtest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"atoll/gpu"
	"atoll/profiles"
	"atoll/sched"
)

// Factory builds the policy named by a script's init command; args are the
// init command's arguments other than policy, hp, be and sms.
type Factory func(name string, args map[string]string) (sched.Policy, error)

// Walk runs every script under dir (see RunScript).
func Walk(t *testing.T, dir string, f Factory) {
	datadriven.Walk(t, dir, func(t *testing.T, path string) { RunScript(t, path, f) })
}

// RunScript runs one script. Commands:
//
//	gpu sms=N                      device SM count (default: H100-SXM's 132)
//	profile name=P                 define a profile; one kernel per line:
//	  NAME dur=50us grid=G block=B [regs=R smem=S class=C sms=N scale=SMS:DUR,...]
//	init policy=X hp=P,... be=Q,... [policy args]   build the core
//	arrive hp=I t=T [id=N]         HP request arrives
//	ready be=I t=T [iterations=N]  BE client starts (or restarts) its loop, N iterations (0: unlimited)
//	pause be=I t=T                 BE client stops launching (EvPause)
//	complete id=L t=T [cut|preempted]   launch L completed (default finished)
//	observed be=I t=T              the device saw BE client I's flag
//	tick t=T                       time passes (prints the wake asked for)
//	stop t=T                       the run ends
//	state                          one-line summary of the core
//	stats                          the core's counters
//
// Each event command prints the decisions it caused, one per line:
// "t=120µs launch L3 hp0 k1 on hp0 plain".
func RunScript(t *testing.T, path string, f Factory) {
	spec := gpu.H100SXM
	profs := map[string]*profiles.Profile{}
	var core *sched.Core
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		args := map[string]string{}
		var flags []string
		for _, a := range d.CmdArgs {
			if len(a.Vals) == 0 {
				flags = append(flags, a.Key)
				continue
			}
			args[a.Key] = strings.Join(a.Vals, ",")
		}
		out, err := func() (string, error) {
			switch d.Cmd {
			case "gpu":
				n, err := strconv.Atoi(args["sms"])
				if err != nil {
					return "", fmt.Errorf("gpu: sms: %w", err)
				}
				spec.SMs = n
				return "", nil
			case "profile":
				p, err := ParseProfile(args["name"], d.Input)
				if err != nil {
					return "", err
				}
				profs[args["name"]] = p
				return "", nil
			case "init":
				cfg := sched.Config{Spec: spec}
				for _, key := range []string{"hp", "be"} {
					if args[key] == "" {
						continue
					}
					for _, n := range strings.Split(args[key], ",") {
						p, ok := profs[n]
						if !ok {
							return "", fmt.Errorf("init: no profile %q", n)
						}
						if key == "hp" {
							cfg.HP = append(cfg.HP, p)
						} else {
							cfg.BE = append(cfg.BE, p)
						}
					}
				}
				if v, ok := args["chunks"]; ok {
					on, err := strconv.ParseBool(v)
					if err != nil {
						return "", fmt.Errorf("init: chunks: %w", err)
					}
					cfg.BEChunks = on
				}
				rest := maps.Clone(args)
				for _, k := range []string{"policy", "hp", "be", "chunks"} {
					delete(rest, k)
				}
				pol, err := f(args["policy"], rest)
				if err != nil {
					return "", err
				}
				cfg.Policy = pol
				core, err = sched.NewCore(cfg)
				if err != nil {
					return "", err
				}
				pl := pol.Streams()
				return fmt.Sprintf("policy %s: %s\n", pol.Name(), pl) + format(core.Decisions()), nil
			}
			if core == nil {
				return "", fmt.Errorf("%s: run init first", d.Cmd)
			}
			var ev sched.Event
			switch d.Cmd {
			case "state":
				return core.Describe() + "\n", nil
			case "stats":
				s := core.State().Stats()
				return fmt.Sprintf("launches=%d hp=%d be=%d padded=%d cuts=%d preempted=%d preemptions=%d requests=%d iterations=%d be-kernels=%d be-work=%s\n",
					s.Launches, s.HPLaunches, s.BELaunches, s.PaddedLaunches, s.Cuts, s.Preempted, s.Preemptions,
					s.Requests, s.Iterations, s.BEKernels, sched.FormatTime(s.BEWork)), nil
			case "arrive":
				ev = sched.Event{Kind: sched.EvArrive, Client: sched.HPClientID(atoi(args["hp"]))}
				ev.Request = atoi(args["id"])
			case "ready":
				ev = sched.Event{Kind: sched.EvReady, Client: sched.BEClientID(atoi(args["be"]))}
				if v, ok := args["iterations"]; ok {
					n, err := strconv.Atoi(v)
					if err != nil {
						return "", fmt.Errorf("ready: iterations: %w", err)
					}
					ev.Iterations = n
				}
			case "pause":
				ev = sched.Event{Kind: sched.EvPause, Client: sched.BEClientID(atoi(args["be"]))}
			case "observed":
				ev = sched.Event{Kind: sched.EvFlagObserved, Client: sched.BEClientID(atoi(args["be"]))}
			case "complete":
				ev = sched.Event{Kind: sched.EvComplete, Launch: sched.LaunchID(atoi(args["id"]))}
				if slices.Contains(flags, "cut") {
					ev.Outcome = sched.Cut
				} else if slices.Contains(flags, "preempted") {
					ev.Outcome = sched.Preempted
				}
			case "tick":
				ev = sched.Event{Kind: sched.EvTick}
			case "stop":
				ev = sched.Event{Kind: sched.EvStop}
			default:
				return "", fmt.Errorf("unknown command %q", d.Cmd)
			}
			tm, err := time.ParseDuration(args["t"])
			if err != nil {
				return "", fmt.Errorf("%s: t: %w", d.Cmd, err)
			}
			ev.Time = tm
			if err := core.Step(ev); err != nil {
				return "", err
			}
			s := format(core.Decisions())
			if w, ok := core.NextWake(); ok {
				s += fmt.Sprintf("wake at %s\n", sched.FormatTime(w))
			}
			return s, nil
		}()
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		return out
	})
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func format(ds []sched.Decision) string {
	var sb strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&sb, "t=%s %s\n", sched.FormatTime(d.Time), d)
	}
	return sb.String()
}

// ParseProfile reads kernels, one per line:
//
//	NAME dur=50us grid=G block=B [regs=R smem=S class=C sms=N scale=SMS:DUR,...]
//
// grid and block are N or XxYxZ. Missing class is "unknown".
func ParseProfile(name, text string) (*profiles.Profile, error) {
	p := &profiles.Profile{APIVersion: profiles.APIVersion, GPU: "H100-SXM", Model: name, Batch: 1, Phase: "inference", Source: profiles.SourceEstimated}
	for ln, line := range strings.Split(strings.TrimSpace(text), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		k := profiles.Kernel{Name: fields[0], Class: profiles.ClassUnknown, Grid: [3]int{1, 1, 1}, Block: [3]int{128, 1, 1}}
		for _, f := range fields[1:] {
			key, val, ok := strings.Cut(f, "=")
			if !ok {
				return nil, fmt.Errorf("profile %s line %d: %q is not key=value", name, ln+1, f)
			}
			var err error
			switch key {
			case "dur":
				var d time.Duration
				d, err = time.ParseDuration(val)
				k.DurationUs = float64(d) / float64(time.Microsecond)
			case "grid":
				k.Grid, err = dim(val)
			case "block":
				k.Block, err = dim(val)
			case "regs":
				k.Registers, err = strconv.Atoi(val)
			case "smem":
				k.SharedMem, err = strconv.Atoi(val)
			case "class":
				k.Class = val
			case "sms":
				k.SMsNeeded, err = strconv.Atoi(val)
			case "tags":
				k.Tags = strings.Split(val, ",")
			case "scale":
				for _, pt := range strings.Split(val, ",") {
					a, b, _ := strings.Cut(pt, ":")
					n, e1 := strconv.Atoi(a)
					d, e2 := time.ParseDuration(b)
					if e1 != nil || e2 != nil {
						return nil, fmt.Errorf("profile %s line %d: bad scaling point %q (want SMS:DUR)", name, ln+1, pt)
					}
					k.Scaling = append(k.Scaling, profiles.Point{SMs: n, DurationUs: float64(d) / float64(time.Microsecond)})
				}
			default:
				err = fmt.Errorf("unknown key")
			}
			if err != nil {
				return nil, fmt.Errorf("profile %s line %d: %s: %w", name, ln+1, key, err)
			}
		}
		p.Kernels = append(p.Kernels, k)
	}
	return p, nil
}

func dim(s string) ([3]int, error) {
	d := [3]int{1, 1, 1}
	for i, part := range strings.SplitN(s, "x", 3) {
		n, err := strconv.Atoi(part)
		if err != nil {
			return d, err
		}
		d[i] = n
	}
	return d, nil
}
