"""The nvidia-smi samples of a tool's run, split by its phases.

tools/gpu/clocks.sh and tools/gpu/context.sh write OUT/phases.txt (a
line "YYYY/MM/DD HH:MM:SS.mmm NAME" as each phase starts, the last one
"end") and OUT/clocks.csv (nvidia-smi --format=csv,noheader,nounits, the
timestamp first); by_phase pairs them.
"""


def by_phase(out, numeric):
    """Yields (phase name, samples) in order: each sample the timestamp,
    the next `numeric` columns as floats, then the rest as strings; rows
    that do not parse (nvidia-smi's [N/A]) are left out."""
    ph = [l.split(' ', 2) for l in open(out + '/phases.txt')]
    ph = [(a + ' ' + b, c.strip()) for a, b, c in ph]
    rows = []
    for l in open(out + '/clocks.csv'):
        f = [x.strip() for x in l.split(',')]
        try:
            rows.append((f[0][:23], *[float(x) for x in f[1:1 + numeric]], *f[1 + numeric:]))
        except ValueError:
            pass
    for i, (t0, name) in enumerate(ph[:-1]):
        yield name, [r for r in rows if t0 <= r[0] < ph[i + 1][0]]
