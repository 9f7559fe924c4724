package fnchain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"tollgate/edge/function"
)

// Source is where the edge fetches modules it has not got: infra/functionstore's Store.
type Source interface {
	Get(ctx context.Context, sha256hex string) ([]byte, error)
}

// ErrUnavailable: the module is neither in memory, on disk, nor (yet) fetched from the
// Source; the routes naming it answer function_unavailable until it arrives.
var ErrUnavailable = errors.New("fnchain: module not available on this edge yet")

// modules holds every module this edge has compiled, once per sha256, and fetches the
// ones it has not got. The bytes are kept in dir (one file per digest) as well, so an edge
// restarted without NATS still has every module it served before.
type modules struct {
	rt           *function.Runtime
	src          Source
	dir          string // "" = no disk copy
	fetchTimeout time.Duration
	retryMax     time.Duration
	onReady      func(tenantIDs []string)
	stop         chan struct{}
	wg           sync.WaitGroup

	mu sync.Mutex
	m  map[string]*moduleEntry
}

type moduleEntry struct {
	done    chan struct{} // closed once the first load has finished (mod or err set)
	mod     *function.Module
	err     error
	waiters map[string]struct{} // tenants whose routes wait for it (err != nil)
}

// get returns the compiled module of digest sha for a route of tenantID. A module not in
// memory is read from disk or fetched, once, however many routes ask at the same time. A
// module that cannot be had returns ErrUnavailable (wrapping why) and is retried in the
// background; onReady then names the tenants that asked, so they recompile.
func (ms *modules) get(sha, tenantID string) (*function.Module, error) {
	ms.mu.Lock()
	e := ms.m[sha]
	if e == nil {
		e = &moduleEntry{done: make(chan struct{})}
		ms.m[sha] = e
		ms.mu.Unlock()
		mod, err := ms.load(sha)
		ms.mu.Lock()
		e.mod, e.err = mod, err
		close(e.done)
		if err != nil {
			e.waiters = map[string]struct{}{tenantID: {}}
			if !errors.Is(err, errCompile) {
				ms.wg.Add(1)
				go ms.retry(sha, e)
			}
		}
		ms.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		return mod, nil
	}
	ms.mu.Unlock()
	<-e.done
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if e.mod != nil {
		return e.mod, nil
	}
	e.waiters[tenantID] = struct{}{}
	return nil, fmt.Errorf("%w: %v", ErrUnavailable, e.err)
}

// retry loads sha again with a growing pause until it succeeds or the host closes.
func (ms *modules) retry(sha string, e *moduleEntry) {
	defer ms.wg.Done()
	wait := 100 * time.Millisecond
	for {
		select {
		case <-ms.stop:
			return
		case <-time.After(wait):
		}
		mod, err := ms.load(sha)
		ms.mu.Lock()
		if err != nil {
			e.err = err
			ms.mu.Unlock()
			if errors.Is(err, errCompile) {
				return // the bytes are right and do not compile: another try would not either
			}
			wait = min(2*wait, ms.retryMax)
			continue
		}
		e.mod, e.err = mod, nil
		ids := make([]string, 0, len(e.waiters))
		for id := range e.waiters {
			ids = append(ids, id)
		}
		e.waiters = nil
		ms.mu.Unlock()
		if ms.onReady != nil {
			ms.onReady(ids)
		}
		return
	}
}

// load reads sha's bytes from disk or the source and compiles them.
func (ms *modules) load(sha string) (*function.Module, error) {
	if !validDigest(sha) {
		return nil, fmt.Errorf("%q is not a sha256 digest", sha)
	}
	b, err := ms.bytes(sha)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := ms.rt.Compile(ctx, sha, b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCompile, err)
	}
	return m, nil
}

// errCompile: the module's bytes are what the route names, and do not compile (an upload
// is checked, so only a runtime that refuses what the api's accepted, as after a downgrade).
var errCompile = errors.New("the module does not compile")

func (ms *modules) bytes(sha string) ([]byte, error) {
	path := ""
	if ms.dir != "" {
		path = filepath.Join(ms.dir, sha+".wasm")
		if b, err := os.ReadFile(path); err == nil {
			if digest(b) == sha {
				return b, nil
			}
			_ = os.Remove(path) // torn or tampered: fetch it again
		}
	}
	if ms.src == nil {
		return nil, errors.New("not on disk and no module store configured")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ms.fetchTimeout)
	defer cancel()
	b, err := ms.src.Get(ctx, sha)
	if err != nil {
		return nil, fmt.Errorf("fetching: %w", err)
	}
	if digest(b) != sha {
		return nil, errors.New("fetched bytes do not match the digest")
	}
	if path != "" {
		if err := writeFileAtomic(path, b); err != nil {
			// The module still serves; only a cold start without NATS would miss it.
			return b, nil
		}
	}
	return b, nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".module-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func validDigest(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// sweep removes from dir the modules inUse does not name that no sweep has seen named
// for grace, and returns their digests. A file's modification time is when a sweep last
// saw a route name it (or when it was fetched), so the grace holds across restarts: a
// module a route named until the edge stopped is kept for grace after it starts. A temp
// file a crash left behind goes after grace too. What memory holds is left alone: routes
// that still run a removed module keep running it, and one named again is fetched again.
func (ms *modules) sweep(inUse func(sha string) bool, grace time.Duration) ([]string, error) {
	if ms.dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(ms.dir)
	if err != nil {
		return nil, fmt.Errorf("fnchain: sweep %s: %w", ms.dir, err)
	}
	now := time.Now()
	var removed []string
	var errs []error
	for _, de := range entries {
		name := de.Name()
		sha, isModule := strings.CutSuffix(name, ".wasm")
		isModule = isModule && validDigest(sha)
		if !isModule && !strings.HasPrefix(name, ".module-") || !de.Type().IsRegular() {
			continue // not ours
		}
		path := filepath.Join(ms.dir, name)
		if isModule && inUse(sha) {
			if err := os.Chtimes(path, now, now); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		info, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if now.Sub(info.ModTime()) < grace {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if isModule {
			removed = append(removed, sha)
		}
	}
	return removed, errors.Join(errs...)
}
