package configfile_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tollgate/edge/configfile"
)

// applied records what a File passes on, and passes it to next if set.
type applied struct {
	mu   sync.Mutex
	log  []string // "put key rev" or "del key"
	next func(string, []byte, uint64)
}

func (a *applied) apply(key string, value []byte, rev uint64) {
	a.mu.Lock()
	if value == nil {
		a.log = append(a.log, "del "+key)
	} else {
		a.log = append(a.log, "put "+key+" "+string(value))
	}
	a.mu.Unlock()
	if a.next != nil {
		a.next(key, value, rev)
	}
}

func (a *applied) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	l := a.log
	a.log = nil
	return l
}

func openFile(t *testing.T, dir string, a *applied, opts ...func(*configfile.Config)) *configfile.File {
	t.Helper()
	cfg := configfile.Config{Dir: dir, Bucket: "tollgate_config", Apply: a.apply, Debounce: time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	f, err := configfile.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

func readSaved(t *testing.T, dir string) *configfile.Contents {
	t.Helper()
	s, err := configfile.Read(dir, "tollgate_config", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func savedKeys(s *configfile.Contents) []string {
	var keys []string
	for _, e := range s.Entries {
		keys = append(keys, e.Key+"="+string(e.Value))
	}
	return keys
}

// The file holds what the watch delivered, puts and deletes applied, once the initial
// load is in; and only then.
func TestConfigFileWritesTheAppliedConfig(t *testing.T) {
	dir := t.TempDir()
	a := &applied{}
	f := openFile(t, dir, a)
	f.Update("t1.tenant", []byte("v1"), 1)
	f.Update("t1.route.r1", []byte("v2"), 2)
	f.Update("t1.route.r2", []byte("v3"), 3)
	f.Update("t1.route.r1", nil, 4)
	time.Sleep(20 * time.Millisecond) // several debounces: still nothing, the load is not in
	if _, err := os.Stat(filepath.Join(dir, configfile.Name)); !os.IsNotExist(err) {
		t.Fatalf("a snapshot was written before the initial load was in (%v)", err)
	}
	if n := f.Current(); n != 0 {
		t.Fatalf("Current deleted %d keys of a config that came from the watch alone", n)
	}
	waitFor(t, 10*time.Second, func() string {
		if _, err := os.Stat(filepath.Join(dir, configfile.Name)); err != nil {
			return err.Error()
		}
		return ""
	})
	s := readSaved(t, dir)
	if want := []string{"t1.route.r2=v3", "t1.tenant=v1"}; !reflect.DeepEqual(savedKeys(s), want) {
		t.Fatalf("saved %v, want %v", savedKeys(s), want)
	}
	if s.Entries[0].Revision != 3 || s.Bucket != "tollgate_config" || time.Since(s.AsOf) > time.Minute {
		t.Fatalf("saved %+v", s)
	}
	f.Update("t1.route.r3", []byte("v5"), 5)
	f.Close() // writes at once
	if got := savedKeys(readSaved(t, dir)); len(got) != 3 {
		t.Fatalf("after Close the file holds %v, want r3 too", got)
	}
	if got := a.take(); len(got) != 5 {
		t.Fatalf("applied %v, want the 5 updates", got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmp) != 0 {
		t.Fatalf("temporary files left: %v", tmp)
	}
}

// A restart serves the snapshot until the initial load is in, then has exactly the
// bucket's keys: what changed while it was away is changed, what vanished (with no delete
// marker left to say so) is deleted, and a key the watch delivered before the snapshot
// was read is not overwritten by the snapshot's older value.
func TestConfigFileRestoreThenCatchUp(t *testing.T) {
	dir := t.TempDir()
	first := openFile(t, dir, &applied{})
	for i, k := range []string{"t1.tenant", "t1.route.keep", "t1.route.changed", "t1.route.vanished", "t1.route.early"} {
		first.Update(k, []byte("old"), uint64(i+1))
	}
	first.Current()
	first.Close()

	a := &applied{}
	f := openFile(t, dir, a)
	f.Update("t1.route.early", []byte("new"), 10) // the watch was quicker for this one
	ok, err := f.Restore(time.Hour)
	if !ok || err != nil {
		t.Fatalf("Restore: %v %v", ok, err)
	}
	if serving, asOf := f.Serving(); !serving || time.Since(asOf) > time.Minute {
		t.Fatalf("Serving() = %v %v", serving, asOf)
	}
	want := []string{"put t1.route.early new", "put t1.route.changed old", "put t1.route.keep old", "put t1.route.vanished old", "put t1.tenant old"}
	if got := a.take(); !reflect.DeepEqual(got, want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	f.Close() // serving a snapshot: nothing to write, the file keeps its as_of
	if got := readSaved(t, dir); len(got.Entries) != 5 || got.Entries[1].Key != "t1.route.early" || string(got.Entries[1].Value) != "old" {
		t.Fatalf("the snapshot was rewritten while being served: %v", savedKeys(got))
	}

	f = openFile(t, dir, a)
	if ok, err := f.Restore(time.Hour); !ok {
		t.Fatal(err)
	}
	a.take()
	// The initial load: the bucket as it is now.
	f.Update("t1.tenant", []byte("old"), 1)
	f.Update("t1.route.keep", []byte("old"), 2)
	f.Update("t1.route.changed", []byte("new"), 11)
	f.Update("t1.route.early", []byte("new"), 12)
	f.Update("t1.route.added", []byte("new"), 13)
	f.Update("t1.route.gone", nil, 14) // a delete marker of a key the snapshot never had
	if n := f.Current(); n != 1 {
		t.Fatalf("Current deleted %d keys, want 1 (vanished)", n)
	}
	got := a.take()
	if got[len(got)-1] != "del t1.route.vanished" {
		t.Fatalf("applied %v, want the vanished key deleted last", got)
	}
	if serving, _ := f.Serving(); serving {
		t.Fatal("still serving the snapshot after the initial load")
	}
	f.Close()
	want = []string{"t1.route.added=new", "t1.route.changed=new", "t1.route.early=new", "t1.route.keep=old", "t1.tenant=old"}
	if got := savedKeys(readSaved(t, dir)); !reflect.DeepEqual(got, want) {
		t.Fatalf("saved %v, want %v", got, want)
	}
	// Once current, a Restore has nothing to do.
	f = openFile(t, dir, a)
	f.Current()
	if ok, err := f.Restore(time.Hour); ok || err != nil {
		t.Fatalf("Restore after Current: %v %v", ok, err)
	}
}

// Every unusable file is refused with a reason, and nothing is applied.
func TestConfigFileRefusesUnusableSnapshots(t *testing.T) {
	good, err := configfile.Encode(&configfile.Contents{
		Bucket: "tollgate_config", AsOf: time.Now().Add(-2 * time.Hour),
		Entries: []configfile.Entry{{Key: "t1.tenant", Revision: 1, Value: []byte(`{}`)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-5] ^= 1
	cases := []struct {
		name   string
		file   []byte // nil: no file
		bucket string
		maxAge time.Duration
		why    string
	}{
		{"no file", nil, "tollgate_config", 24 * time.Hour, "no such file"},
		{"off", good, "tollgate_config", 0, "snapshots are off"},
		{"too old", good, "tollgate_config", time.Hour, "older than"},
		{"other bucket", good, "other_config", 24 * time.Hour, "of bucket"},
		{"truncated", good[:len(good)-3], "tollgate_config", 24 * time.Hour, "truncated"},
		{"flipped bit", flipped, "tollgate_config", 24 * time.Hour, "checksum"},
		{"empty", []byte{}, "tollgate_config", 24 * time.Hour, "no header"},
		{"other version", bytes.Replace(good, []byte("config 1 "), []byte("config 2 "), 1), "tollgate_config", 24 * time.Hour, "version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.file != nil {
				if err := os.WriteFile(filepath.Join(dir, configfile.Name), c.file, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			a := &applied{}
			f, err := configfile.Open(configfile.Config{Dir: dir, Bucket: c.bucket, Apply: a.apply})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ok, err := f.Restore(c.maxAge)
			if ok || err == nil || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("Restore = %v, %v; want false and an error saying %q", ok, err, c.why)
			}
			if got := a.take(); len(got) != 0 {
				t.Fatalf("applied %v from a refused file", got)
			}
		})
	}
}

// An edge serving a snapshot says so on /readyz and in its metrics, and stops saying so
// once it has caught up.

// A snapshot file is read at start from a disk that may have been damaged in any way;
// reading it must never panic, and what it accepts must survive a round trip.
func FuzzDecode(f *testing.F) {
	good, _ := configfile.Encode(&configfile.Contents{
		Bucket: "b", AsOf: time.Unix(1700000000, 0).UTC(),
		Entries: []configfile.Entry{{Key: "t.tenant", Revision: 1, Value: []byte("{}")}, {Key: "t.route.r", Revision: 7, Value: []byte("x")}},
	})
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte("tollgate-edge-config 1 2 00000000\n{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := configfile.Decode(b)
		if err != nil {
			return
		}
		again, err := configfile.Encode(s)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", b, err)
		}
		s2, err := configfile.Decode(again)
		if err != nil || !reflect.DeepEqual(s.Entries, s2.Entries) || s.Bucket != s2.Bucket || !s.AsOf.Equal(s2.AsOf) {
			t.Fatalf("round trip of %q: %v", b, err)
		}
	})
}

// A change written while NATS is away (a write at shutdown, say) keeps the time the
// config was last known current, so a snapshot never looks younger than it is.
func TestConfigFileAsOfIsWhenLastConnected(t *testing.T) {
	dir := t.TempDir()
	var connected atomic.Bool
	connected.Store(true)
	f := openFile(t, dir, &applied{}, func(c *configfile.Config) { c.Connected = connected.Load })
	f.Update("t1.tenant", []byte("v1"), 1)
	f.Current()
	f.Close()
	asOf := readSaved(t, dir).AsOf

	f = openFile(t, dir, &applied{}, func(c *configfile.Config) { c.Connected = connected.Load })
	f.Update("t1.tenant", []byte("v1"), 1)
	f.Current()
	connected.Store(false)
	before := time.Now()
	time.Sleep(10 * time.Millisecond)
	f.Update("t1.route.r", []byte("v2"), 2)
	f.Close()
	s := readSaved(t, dir)
	if len(s.Entries) != 2 || s.AsOf.After(before) || s.AsOf.Before(asOf) {
		t.Fatalf("written while disconnected: as_of %v (the load came at or before %v), %d entries", s.AsOf, before, len(s.Entries))
	}
}

// Values written once are kept packed, and a later file (after changes, and after a
// restart that restored the packed-then-written file) holds exactly the values the
// watch delivered; RawValues keeps them as delivered.
func TestConfigFilePacksKeptValues(t *testing.T) {
	route := func(i, version int) []byte {
		return fmt.Appendf(nil, `{"rev":%d,"route":{"id":"r%d","tenant_id":"t1","name":"route %d","paths":["/r%d"],`+
			`"methods":[],"upstream":{"targets":[{"url":"http://127.0.0.1:8081","weight":1}],"balance":"round_robin"},`+
			`"auth":"none","policy":false,"strip_prefix":false,"websocket":false,"max_body_bytes":10485760,`+
			`"connect_timeout_ms":2000,"timeout_ms":30000,"version":%d}}`, version, i, i, i, version)
	}
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			dir := t.TempDir()
			f := openFile(t, dir, &applied{}, func(c *configfile.Config) { c.RawValues = raw })
			want := map[string]string{"t1.tenant": `{"rev":1,"tenant":{}}`, "t1.policy": "short"}
			f.Update("t1.tenant", []byte(want["t1.tenant"]), 1)
			f.Update("t1.policy", []byte(want["t1.policy"]), 2)
			const n = 200
			delivered := 0
			for i := range n {
				k := fmt.Sprintf("t1.route.r%03d", i)
				v := route(i, 1)
				want[k] = string(v)
				delivered += len(v)
				f.Update(k, v, uint64(10+i))
			}
			f.Current()
			check := func(when string) {
				t.Helper()
				s := readSaved(t, dir)
				got := map[string]string{}
				for _, e := range s.Entries {
					got[e.Key] = string(e.Value)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: the file holds %d entries, want %d (or values differ)", when, len(got), len(want))
				}
			}
			waitFor(t, 10*time.Second, func() string {
				if all, packed, _ := f.KeptValues(); !raw && packed != n {
					return fmt.Sprintf("%d of %d values packed", packed, all)
				}
				if _, err := os.Stat(filepath.Join(dir, configfile.Name)); err != nil {
					return err.Error()
				}
				return ""
			})
			check("first write")
			_, packed, size := f.KeptValues()
			t.Logf("routes delivered %d bytes; kept %d bytes, %d values packed", delivered, size, packed)
			if !raw && size*4 > delivered {
				t.Fatalf("packed values take %d bytes of %d delivered", size, delivered)
			}
			if raw && packed != 0 {
				t.Fatalf("RawValues kept %d values packed", packed)
			}
			// Change a packed value, delete one, add one: the next file has exactly those.
			want["t1.route.r005"] = string(route(5, 2))
			f.Update("t1.route.r005", []byte(want["t1.route.r005"]), 1000)
			delete(want, "t1.route.r006")
			f.Update("t1.route.r006", nil, 1001)
			want["t1.route.r999"] = string(route(999, 1))
			f.Update("t1.route.r999", []byte(want["t1.route.r999"]), 1002)
			f.Close()
			check("after changes")

			// A restart restores the file, then the same load comes in: the file it
			// writes is the same.
			saved := readSaved(t, dir)
			f2 := openFile(t, dir, &applied{}, func(c *configfile.Config) { c.RawValues = raw })
			if ok, err := f2.Restore(time.Hour); !ok {
				t.Fatalf("restore: %v", err)
			}
			for _, e := range saved.Entries {
				f2.Update(e.Key, e.Value, e.Revision)
			}
			f2.Current()
			f2.Close()
			check("after a restart")
		})
	}
}

// The writer lets go of the entries while it copies them, so changes go on meanwhile;
// whatever a write caught of them, the file ends up holding exactly the final entries,
// sorted by key.
func TestConfigFileWritesWhileChanging(t *testing.T) {
	dir := t.TempDir()
	f := openFile(t, dir, &applied{})
	want := map[string]string{}
	for i := range 5000 {
		k := fmt.Sprintf("t1.route.r%05d", i)
		want[k] = "v0"
		f.Update(k, []byte("v0"), uint64(i+1))
	}
	f.Current()
	rev := uint64(5000)
	for round := range 200 {
		for j := range 50 {
			rev++
			k := fmt.Sprintf("t1.route.r%05d", (round*97+j*31)%6000)
			if j%7 == 0 {
				delete(want, k)
				f.Update(k, nil, rev)
				continue
			}
			v := fmt.Sprintf("v%d", rev)
			want[k] = v
			f.Update(k, []byte(v), rev)
		}
		time.Sleep(time.Millisecond) // the writer (1 ms debounce) copies meanwhile
	}
	f.Close()
	s := readSaved(t, dir)
	got := map[string]string{}
	for i, e := range s.Entries {
		if i > 0 && s.Entries[i-1].Key >= e.Key {
			t.Fatalf("entries not sorted: %q before %q", s.Entries[i-1].Key, e.Key)
		}
		got[e.Key] = string(e.Value)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the file holds %d entries, want %d; first differences: %v", len(got), len(want), firstDiffs(got, want, 5))
	}
}

func firstDiffs(got, want map[string]string, n int) []string {
	var d []string
	for k, v := range want {
		if got[k] != v && len(d) < n {
			d = append(d, fmt.Sprintf("%s: %q, want %q", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && len(d) < n {
			d = append(d, k+": not deleted")
		}
	}
	return d
}

// waitFor polls fn until it returns "" or d has passed.
func waitFor(t testing.TB, d time.Duration, fn func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := fn()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v: %s", d, msg)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
