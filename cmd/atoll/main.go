package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// version is stamped at link time (-ldflags "-X main.version=...").
var version = "dev"

// command is one subcommand: its one-line summary, a longer help text, and
// the function that runs it with its own flag set.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env carries the process's streams, so commands are testable.
type env struct {
	stdout, stderr io.Writer
}

var commands []command

func register(c command) { commands = append(commands, c) }

// errUsage is returned after a command printed its usage for bad flags.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, e *env, args []string) int {
	sort.Slice(commands, func(i, j int) bool { return commands[i].name < commands[j].name })
	if len(args) == 0 {
		// No command is a usage error: the help goes to stderr, exit 2.
		usage(e.stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 {
			return run(ctx, e, []string{args[1], "--help"})
		}
		usage(e.stdout)
		return 0
	}
	if args[0] == "version" || args[0] == "--version" {
		fmt.Fprintf(e.stdout, "atoll %s\n", version)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, e, args[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			}
			fmt.Fprintf(e.stderr, "atoll %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "atoll: unknown command %q\n\n", args[0])
	usage(e.stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `atoll %s — a kernel-level preemptive GPU scheduler for inference.

atoll lets best-effort (BE) work such as training steps share a GPU with
latency-critical (HP) inference without hurting the HP tail latency. It runs
on a real NVIDIA GPU through the CUDA driver, or on a built-in simulated GPU
when none is present.

Usage:
  atoll <command> [flags]

Commands:
`, version)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `  version   print the version

Run 'atoll <command> --help' for a command's flags and examples.
Start with:  atoll demo
`)
}

// newFlags makes a flag set whose usage shows the command's help text.
func newFlags(e *env, name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet("atoll "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprint(e.stderr, strings.TrimLeft(help, "\n"))
		fmt.Fprintln(e.stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags and maps errors to errUsage / flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}
