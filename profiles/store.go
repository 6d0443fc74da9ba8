package profiles

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"atoll/internal/gzipped"
)

// StoreEnv names the environment variable that sets the profile store.
const StoreEnv = "ATOLL_PROFILES"

// StoreDir is the profile store: the directory `atoll profile` writes to
// and every lookup reads first (<dir>/<gpu>/<model>-bs<N>.json, as in the
// embedded set, or the same gzipped as <model>-bs<N>.json.gz, which a
// lookup reads where the plain file is absent), so a profile made on this machine is used without a
// rebuild and takes precedence over the embedded one of the same name. It
// is $ATOLL_PROFILES when set, else atoll/profiles under the user's cache
// directory (os.UserCacheDir); "" when neither exists.
func StoreDir() string {
	if d := os.Getenv(StoreEnv); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "atoll", "profiles")
	}
	return ""
}

// StorePath is where the store keeps the profile of a GPU, model and batch
// ("" without a store).
func StorePath(gpuName, model string, batch int) string {
	d := StoreDir()
	if d == "" {
		return ""
	}
	return filepath.Join(d, filepath.FromSlash(FileName(gpuName, model, batch)))
}

// readStore reads file (a FileName) from the store; ok is false when the
// store does not have it.
func readStore(file string) (data []byte, path string, ok bool, err error) {
	d := StoreDir()
	if d == "" {
		return nil, "", false, nil
	}
	path = filepath.Join(d, filepath.FromSlash(file))
	data, err = os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if data, err = os.ReadFile(path + ".gz"); errors.Is(err, fs.ErrNotExist) {
			return nil, path, false, nil
		}
		path += ".gz"
		if err == nil {
			if data, err = gzipped.Unwrap(data); err != nil {
				err = fmt.Errorf("profiles: %s: %w", path, err)
			}
		}
	}
	return data, path, err == nil, err
}

// storeEntries lists the store's profiles.
func storeEntries() []Entry {
	d := StoreDir()
	if d == "" {
		return nil
	}
	paths, _ := filepath.Glob(filepath.Join(d, "*", "*.json"))
	zipped, _ := filepath.Glob(filepath.Join(d, "*", "*.json.gz"))
	var out []Entry
	seen := map[string]bool{}
	for _, p := range append(paths, zipped...) {
		rel, err := filepath.Rel(d, p)
		if err != nil {
			continue
		}
		rel = strings.TrimSuffix(filepath.ToSlash(rel), ".gz")
		if e, ok := parseEntry(rel); ok && !seen[rel] {
			seen[rel] = true // the plain file wins, as in readStore
			e.Path, e.Stored = p, true
			out = append(out, e)
		}
	}
	return out
}
