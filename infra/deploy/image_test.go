package deploy

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"tollgate/infra/testenv"
)

// The image's recipe, checked without Docker: CI has no engine, and what can go wrong
// with the recipe is in what it builds and how the manifests run it, which a plain
// `go build` with the recipe's own flags shows.

// stage is one FROM of a Dockerfile and the instructions under it.
type stage struct {
	from, name string
	instrs     []instruction
}

type instruction struct {
	cmd  string // upper case: RUN, COPY, ENV…
	args string // the rest of the line, continuations joined
}

// parseDockerfile reads the stages of a Dockerfile: comments and blank lines dropped,
// backslash continuations joined. FROM flags (--platform) are dropped.
func parseDockerfile(data string) ([]*stage, error) {
	var stages []*stage
	var line strings.Builder
	flush := func() error {
		s := strings.TrimSpace(line.String())
		line.Reset()
		if s == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(s, " ")
		cmd, args = strings.ToUpper(cmd), strings.TrimSpace(args)
		if cmd == "FROM" {
			f := strings.Fields(args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			st := &stage{}
			switch {
			case len(f) == 1:
				st.from = f[0]
			case len(f) == 3 && strings.EqualFold(f[1], "AS"):
				st.from, st.name = f[0], f[2]
			default:
				return fmt.Errorf("FROM %s: want an image and an optional AS name", args)
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if cmd == "ARG" {
				return nil // an ARG before the first FROM only feeds FROM lines
			}
			return fmt.Errorf("%s before the first FROM", cmd)
		}
		st := stages[len(stages)-1]
		st.instrs = append(st.instrs, instruction{cmd, args})
		return nil
	}
	for _, raw := range strings.Split(data, "\n") {
		trimmed := strings.TrimSpace(raw)
		if strings.HasPrefix(trimmed, "#") {
			continue // a comment (or a parser directive), also inside a continued line
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(raw, " \t"), "\\"); ok {
			line.WriteString(s + " ")
			continue
		}
		line.WriteString(raw)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return stages, nil
}

// shellWords splits a shell command line as /bin/sh would for the plain commands a
// Dockerfile's RUN holds: quotes, backslashes and $VAR / ${VAR} from env. Anything more
// (pipes, lists, substitutions) is refused, so the recipe stays one this test can run.
func shellWords(s string, env map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	expand := func(i int) (int, error) {
		// s[i] == '$'
		rest := s[i+1:]
		var name string
		n := 0
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return 0, fmt.Errorf("unclosed ${ in %q", s)
			}
			name, n = rest[1:end], end+1
		} else {
			for n < len(rest) && (rest[n] == '_' || rest[n] >= 'A' && rest[n] <= 'Z' || rest[n] >= 'a' && rest[n] <= 'z' || n > 0 && rest[n] >= '0' && rest[n] <= '9') {
				n++
			}
			name = rest[:n]
		}
		if name == "" {
			return 0, fmt.Errorf("a $ that names no variable in %q", s)
		}
		w.WriteString(env[name])
		inWord = true
		return i + n, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			w.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case c == '"':
			inWord = true
			for i++; ; i++ {
				if i >= len(s) {
					return nil, fmt.Errorf(`unclosed " in %q`, s)
				}
				if s[i] == '"' {
					break
				}
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`, s[i+1]) >= 0 {
					i++
					w.WriteByte(s[i])
					continue
				}
				if s[i] == '$' {
					var err error
					if i, err = expand(i); err != nil {
						return nil, err
					}
					continue
				}
				if s[i] == '`' {
					return nil, fmt.Errorf("command substitution in %q", s)
				}
				w.WriteByte(s[i])
			}
		case c == '\\':
			if i+1 < len(s) {
				i++
				w.WriteByte(s[i])
				inWord = true
			}
		case c == '$':
			var err error
			if i, err = expand(i); err != nil {
				return nil, err
			}
		case strings.IndexByte("|&;<>()`*?[", c) >= 0:
			return nil, fmt.Errorf("%q holds %q: keep the recipe's RUN lines plain commands", s, c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// dockerignore is a .dockerignore's patterns, matched as Docker does: each against the
// path relative to the context root, `**` spanning any number of directories, a
// directory's match covering all it holds, and the last matching pattern winning (a `!`
// one re-includes).
type dockerignore []struct {
	parts   []string
	exclude bool
}

func parseDockerignore(data string) dockerignore {
	var d dockerignore
	for _, l := range strings.Split(data, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		exclude := true
		if p, ok := strings.CutPrefix(l, "!"); ok {
			l, exclude = strings.TrimSpace(p), false
		}
		l = strings.TrimPrefix(path.Clean("/"+l), "/")
		d = append(d, struct {
			parts   []string
			exclude bool
		}{strings.Split(l, "/"), exclude})
	}
	return d
}

// matchParts reports whether pattern parts match a prefix of the path's parts that ends
// at a path element (the path itself or one of its parent directories).
func matchParts(pat, p []string) bool {
	if len(pat) == 0 {
		return true // the pattern matched a parent directory of the path
	}
	if pat[0] == "**" {
		for i := 0; i <= len(p); i++ {
			if matchParts(pat[1:], p[i:]) {
				return true
			}
		}
		return false
	}
	if len(p) == 0 {
		return false
	}
	ok, err := filepath.Match(pat[0], p[0])
	return err == nil && ok && matchParts(pat[1:], p[1:])
}

func (d dockerignore) excluded(rel string) bool {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	ex := false
	for _, p := range d {
		if matchParts(p.parts, parts) {
			ex = p.exclude
		}
	}
	return ex
}

// copyContext copies the build context Docker would send (root minus .dockerignore) to dst.
func copyContext(root, dst string, ignore dockerignore) error {
	reincludes := slices.ContainsFunc(ignore, func(p struct {
		parts   []string
		exclude bool
	}) bool {
		return !p.exclude
	})
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		if ignore.excluded(rel) {
			if d.IsDir() && !reincludes {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				return nil
			}
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// goVersion parses "1.26" or "1.26.8" into numbers.
func goVersion(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a Go version", s)
		}
		v = append(v, n)
	}
	if len(v) < 2 || len(v) > 3 {
		return nil, fmt.Errorf("%q is not a Go version", s)
	}
	return v, nil
}

// TestImage builds the binaries as the Dockerfile's build stage does, from the context
// .dockerignore leaves, and checks they are the static binaries the runtime stage and
// the manifests expect: no dynamic loader, run on nothing but themselves, run as the
// user the pods run as, answer the subcommands the Deployments pass.
func TestImage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(data))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s), want a build stage and a runtime stage", len(stages))
	}
	final := stages[len(stages)-1]

	// The runtime stage: distroless static, nonroot, the binaries copied from the build
	// stage and one of them run as the entrypoint.
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") || !strings.HasSuffix(final.from, ":nonroot") {
		t.Errorf("runtime stage is FROM %s, want gcr.io/distroless/static-…:nonroot (CA certificates and tzdata, no shell, no libc)", final.from)
	}
	var user, copyFrom string
	copies := map[string]string{} // a binary's path in the image: its path in the build stage
	var entrypoint []string
	for _, in := range final.instrs {
		switch in.cmd {
		case "USER":
			user = in.args
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) != 3 || !strings.HasPrefix(f[0], "--from=") {
				t.Fatalf("runtime stage COPY %s: want COPY --from=<build stage> <binary> <path>", in.args)
			}
			from := strings.TrimPrefix(f[0], "--from=")
			if copyFrom != "" && from != copyFrom {
				t.Fatalf("runtime stage copies from %s and from %s: this test builds one build stage", copyFrom, from)
			}
			copyFrom, copies[f[2]] = from, f[1]
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Errorf("ENTRYPOINT %s is not the exec form (a JSON array): signals would go to a shell, and the image has none", in.args)
			}
		case "RUN":
			t.Errorf("runtime stage runs %q: the static image has no shell", in.args)
		}
	}
	if len(entrypoint) != 1 || copies[entrypoint[0]] == "" || path.Base(entrypoint[0]) != "tollgate" {
		t.Fatalf("ENTRYPOINT %q, want exactly tollgate, one of the binaries the stage copies %v (the Deployments pass the subcommand as args)", entrypoint, slices.Sorted(maps.Keys(copies)))
	}
	uid, gid, ok := strings.Cut(user, ":")
	u, uerr := strconv.ParseInt(uid, 10, 64)
	g, gerr := strconv.ParseInt(gid, 10, 64)
	if !ok || uerr != nil || gerr != nil || u == 0 || g == 0 {
		t.Fatalf("runtime stage USER %q, want a numeric non-root uid:gid (Kubernetes checks runAsNonRoot against a numeric user only)", user)
	}

	var builder *stage
	for _, s := range stages {
		if s.name == copyFrom {
			builder = s
		}
	}
	if builder == nil {
		t.Fatalf("runtime stage copies from %q, which no stage is named", copyFrom)
	}
	checkBuilderGo(t, root, builder.from)

	// The manifests run this image: as its user, on a read-only root with writable
	// volumes where the processes write, binaries the image has with subcommands they have.
	o := build(t, filepath.Join("overlays", "prod"))
	procs := checkPodsRunImage(t, o, u, g, entrypoint[0], copies)

	// The build stage's RUN lines, in order, in a copy of the context Docker would send.
	ctx := filepath.Join(t.TempDir(), "src")
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if err := copyContext(root, ctx, parseDockerignore(string(ignore))); err != nil {
		t.Fatalf("copying the build context: %v", err)
	}
	outDir := t.TempDir()
	built := map[string]string{} // a binary's path in the build stage: where this test built it
	env := map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH,
		"BUILDPLATFORM": runtime.GOOS + "/" + runtime.GOARCH}
	for _, in := range builder.instrs {
		switch in.cmd {
		case "ARG":
			for _, a := range strings.Fields(in.args) {
				if k, v, ok := strings.Cut(a, "="); ok && env[k] == "" {
					env[k] = v
				}
			}
		case "ENV":
			words, err := shellWords(in.args, env)
			if err != nil {
				t.Fatalf("ENV %s: %v", in.args, err)
			}
			for _, w := range words {
				k, v, ok := strings.Cut(w, "=")
				if !ok {
					t.Fatalf("ENV %s: write ENV NAME=value", in.args)
				}
				env[k] = v
			}
		case "WORKDIR":
			if in.args != "/src" {
				t.Errorf("build stage WORKDIR %s: this test builds in the context's copy as /src", in.args)
			}
		case "COPY":
			f := strings.Fields(in.args)
			for _, src := range f[:len(f)-1] {
				if strings.HasPrefix(src, "--") {
					t.Fatalf("build stage COPY %s: this test copies from the context only", in.args)
				}
				if _, err := os.Stat(filepath.Join(ctx, src)); err != nil {
					t.Errorf("build stage COPY %s: %s is not in the build context (.dockerignore?): %v", in.args, src, err)
				}
			}
		case "RUN":
			src, bin := runBuildStep(t, ctx, in.args, env, copies, outDir)
			switch {
			case src == "" && len(built) > 0:
				t.Fatalf("build stage RUN %s after go build: the test does not know how it changes the binaries", in.args)
			case built[src] != "":
				t.Fatalf("build stage RUN %s writes %s a second time", in.args, src)
			case src != "":
				built[src] = bin
			}
		default:
			t.Fatalf("build stage %s %s: this test does not know what it does", in.cmd, in.args)
		}
	}
	// In the image, each binary's path: where this test built it.
	bins := map[string]string{}
	for dst, src := range copies {
		if built[src] == "" {
			t.Fatalf("no RUN of the build stage writes %s (go build -o %s), which the runtime stage copies to %s", src, src, dst)
		}
		bins[dst] = built[src]
		checkStaticBinary(t, bins[dst], path.Base(dst))
	}

	// They run, with nothing from the machine: an empty environment and directory, as in
	// the image, which has no shell, no HOME and no libraries. One that serves instead of
	// exiting (the wrong package built, a setting no longer refused) is stopped rather
	// than left to hang the test.
	run := func(bin string, env []string, args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%s %q did not exit within a minute:\n%s", bin, args, out)
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s %q: %v", bin, args, err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	tollgate := bins[entrypoint[0]]
	usage, code := run(tollgate, []string{})
	if code != 2 || !strings.Contains(usage, "Usage:") || !strings.Contains(usage, "tollgate [command]") {
		t.Errorf("tollgate without a command: exit %d, want 2 and the usage:\n%s", code, usage)
	}
	for _, p := range procs {
		if p.bin == entrypoint[0] {
			if !strings.Contains(usage, "\n  "+p.args[0]+" ") {
				t.Errorf("%s runs `tollgate %s`, which the binary's usage does not list:\n%s", p.where, p.args[0], usage)
			}
			continue
		}
		// A binary the pod runs as its command takes no subcommand: run as the pod runs
		// it, it reads its settings at once (config.FromEnv, as every Tollgate process
		// does) and refuses one that is not host:port, naming it, before it dials NATS.
		name := path.Base(p.bin)
		out, code := run(bins[p.bin], []string{"TOLLGATE_EDGE_ADDR=not-an-address"}, p.args...)
		if code != 1 || !strings.HasPrefix(out, name+": TOLLGATE_EDGE_ADDR") {
			t.Errorf("%s: %s %q with TOLLGATE_EDGE_ADDR=not-an-address: exit %d, want 1 and %q refusing the setting:\n%s",
				p.where, name, p.args, code, name+": TOLLGATE_EDGE_ADDR: …", out)
		}
	}
	// `tollgate migrate`, the README's command that exits on its own: the static binary
	// reaches Postgres with Go's own resolver, migrates and exits 0.
	out, code := run(tollgate, []string{"TOLLGATE_DATABASE_URL=" + testenv.Postgres(t)}, "migrate")
	if code != 0 || !strings.Contains(out, "database migrated") {
		t.Errorf("tollgate migrate: exit %d, want 0:\n%s", code, out)
	}
}

// checkBuilderGo: the builder image's Go is the release go.mod asks for (a golang:1.26…
// tag for `go 1.26.x`), no older than its patch when the tag names one.
func checkBuilderGo(t *testing.T, root, from string) {
	t.Helper()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, l := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			if want, err = goVersion(strings.TrimSpace(v)); err != nil {
				t.Fatalf("go.mod: %v", err)
			}
		}
	}
	tag, ok := strings.CutPrefix(from, "golang:")
	if !ok || want == nil {
		t.Fatalf("build stage is FROM %s, want golang:<go.mod's release>", from)
	}
	tag, _, _ = strings.Cut(tag, "-") // golang:1.26-trixie
	have, err := goVersion(tag)
	if err != nil {
		t.Fatalf("build stage FROM %s: %v", from, err)
	}
	if have[0] != want[0] || have[1] != want[1] || len(have) == 3 && len(want) == 3 && have[2] < want[2] {
		t.Errorf("build stage FROM %s, go.mod wants go %v: the image would fetch another toolchain or refuse the module", from, want)
	}
}

// runBuildStep runs one RUN of the build stage in ctx: a go command, with the stage's
// environment and the line's own NAME=value words. A go build must write one of the
// binaries the runtime stage copies (copies' values); its output goes to the same name
// in outDir instead, and runBuildStep returns the binary's path in the build stage and
// where it was built. Any other command returns "".
func runBuildStep(t *testing.T, ctx, line string, env, copies map[string]string, outDir string) (src, bin string) {
	t.Helper()
	f := strings.Fields(line)
	for len(f) > 0 && strings.HasPrefix(f[0], "--") { // BuildKit's --mount=type=cache…
		line = strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		f = f[1:]
	}
	words, err := shellWords(line, env)
	if err != nil {
		t.Fatalf("RUN %s: %v", line, err)
	}
	stepEnv := map[string]string{}
	for k, v := range env {
		stepEnv[k] = v
	}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		k, v, _ := strings.Cut(words[0], "=")
		stepEnv[k] = v
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" {
		t.Fatalf("RUN %s: the build stage runs go commands only (this test runs them)", line)
	}
	if words[1] == "build" {
		i := slices.Index(words, "-o")
		if i < 0 || i+1 >= len(words) {
			t.Fatalf("RUN %s: go build without -o", line)
		}
		src = words[i+1]
		if !slices.Contains(slices.Collect(maps.Values(copies)), src) {
			t.Fatalf("RUN %s writes %s, which the runtime stage does not copy (it copies %v)", line, src, slices.Sorted(maps.Values(copies)))
		}
		bin = filepath.Join(outDir, path.Base(src))
		words[i+1] = bin
		if stepEnv["CGO_ENABLED"] != "0" || !slices.Contains(words, "-trimpath") {
			t.Errorf("RUN %s: want CGO_ENABLED=0 (a static binary) and -trimpath", line)
		}
	}
	cmd := exec.Command("go", words[1:]...)
	cmd.Dir = ctx
	// The machine's environment for the module and build caches; the golang image sets
	// no GOFLAGS, so neither does the build here.
	cmd.Env = append(os.Environ(), "GOFLAGS=")
	for k, v := range stepEnv {
		if v == "" && (k == "GOOS" || k == "GOARCH") {
			continue // an ARG the classic builder leaves empty: go's own default
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("RUN %s: %v\n%s", line, err, out)
	}
	return src, bin
}

// checkStaticBinary: an ELF with no interpreter and no shared libraries, for this
// machine, built by the Go toolchain with cgo off and paths trimmed, from a main package
// of the module named as the image names the binary.
func checkStaticBinary(t *testing.T, bin, name string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the built %s is not an ELF file: %v", name, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a PT_INTERP program header: it needs a dynamic loader, which the static image lacks", name)
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a PT_DYNAMIC segment: it is dynamically linked", name)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", name, libs)
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
	if want != 0 && f.Machine != want {
		t.Errorf("%s is for %v, want %v", name, f.Machine, want)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s build info: %v", name, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("%s's build settings: CGO_ENABLED=%q -trimpath=%q, want 0 and true", name, settings["CGO_ENABLED"], settings["-trimpath"])
	}
	if info.Main.Path != "tollgate" || path.Base(info.Path) != name {
		t.Errorf("the image's %s is %s of module %s, want a main package of module tollgate named %s", name, info.Path, info.Main.Path, name)
	}
}

// process is what a Tollgate container runs: one of the image's binaries, by its path
// in the image, and the arguments the container passes it.
type process struct {
	where string // the Deployment and container
	bin   string
	args  []string
}

// checkPodsRunImage: every Tollgate container runs the image's entrypoint (no command of
// its own) with a subcommand, or as its command alone one of the binaries the image
// copies (copies' keys), as the image's user, on a read-only root filesystem whose
// writable places (/tmp, the meter's spool) are volumes. It returns what they run.
func checkPodsRunImage(t *testing.T, o *objects, uid, gid int64, entrypoint string, copies map[string]string) []process {
	t.Helper()
	var procs []process
	for _, d := range o.deployments {
		pod := d.Spec.Template.Spec
		for _, c := range pod.Containers {
			if !isTollgateImage(c.Image) {
				continue
			}
			where := d.Name + " container " + c.Name
			p := process{where: where, bin: entrypoint, args: c.Args}
			if len(c.Command) == 1 && copies[c.Command[0]] != "" {
				p.bin = c.Command[0]
			} else if len(c.Command) != 0 {
				// The image has no shell, nor anything else to run.
				t.Errorf("%s: command %q, want none (the entrypoint) or one of the image's binaries %v", where, c.Command, slices.Sorted(maps.Keys(copies)))
				continue
			}
			if p.bin == entrypoint && len(p.args) == 0 {
				t.Errorf("%s runs the image's entrypoint without a subcommand", where)
				continue
			}
			procs = append(procs, p)
			runAs := func(pod *int64, ctr *int64) int64 {
				if ctr != nil {
					return *ctr
				}
				if pod != nil {
					return *pod
				}
				return uid // unset: the image's USER
			}
			var podUser, podGroup *int64
			var podNonRoot *bool
			if pod.SecurityContext != nil {
				podUser, podGroup, podNonRoot = pod.SecurityContext.RunAsUser, pod.SecurityContext.RunAsGroup, pod.SecurityContext.RunAsNonRoot
			}
			sc := c.SecurityContext
			if sc == nil {
				sc = &corev1.SecurityContext{}
			}
			if u := runAs(podUser, sc.RunAsUser); u != uid {
				t.Errorf("%s runs as user %d, the image's USER is %d", where, u, uid)
			}
			if g := runAs(podGroup, sc.RunAsGroup); g != gid {
				t.Errorf("%s runs as group %d, the image's USER group is %d", where, g, gid)
			}
			nonRoot := sc.RunAsNonRoot
			if nonRoot == nil {
				nonRoot = podNonRoot
			}
			if nonRoot == nil || !*nonRoot {
				t.Errorf("%s does not set runAsNonRoot", where)
			}
			if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("%s: readOnlyRootFilesystem is not set", where)
			}
			writable := []string{"/tmp"}
			for _, e := range c.Env {
				if e.Name == "TOLLGATE_METER_SPOOL_DIR" {
					writable = append(writable, e.Value)
				}
			}
			if p.bin == entrypoint && p.args[0] == "edge" || path.Base(p.bin) == "tollgate-edge" {
				writable = append(writable, o.configMap(t, "tollgate-config").Data["TOLLGATE_METER_SPOOL_DIR"])
			}
			for _, dir := range writable {
				m := mountFor(c, dir)
				if m == nil || m.ReadOnly || !isEmptyDir(pod, m.Name) {
					t.Errorf("%s writes to %s, which is not on a writable emptyDir volume (the root filesystem is read-only)", where, dir)
				}
			}
		}
	}
	if len(procs) == 0 {
		t.Fatal("no Deployment runs the tollgate image")
	}
	return procs
}

// isTollgateImage: the image name, registry and tag aside, is tollgate.
func isTollgateImage(image string) bool {
	name := image
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	name, _, _ = strings.Cut(name, "@")
	name, _, _ = strings.Cut(name, ":")
	return name == "tollgate"
}

// mountFor is the volume mount holding path (the longest mount path above it), or nil.
func mountFor(c corev1.Container, p string) *corev1.VolumeMount {
	var best *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		mp := strings.TrimSuffix(m.MountPath, "/")
		if (p == mp || strings.HasPrefix(p, mp+"/")) && (best == nil || len(mp) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	return best
}

func isEmptyDir(pod corev1.PodSpec, volume string) bool {
	for _, v := range pod.Volumes {
		if v.Name == volume {
			return v.EmptyDir != nil
		}
	}
	return false
}

// TestImageHelpers pins the parsers the image test relies on.
func TestImageHelpers(t *testing.T) {
	words, err := shellWords(`GOOS=$TARGETOS go build -ldflags="-s -w -X 'main.v=${V}'" -o '/out/a b' .`, map[string]string{"TARGETOS": "linux", "V": "1"})
	if err != nil || !slices.Equal(words, []string{"GOOS=linux", "go", "build", "-ldflags=-s -w -X 'main.v=1'", "-o", "/out/a b", "."}) {
		t.Errorf("shellWords = %q, %v", words, err)
	}
	if _, err := shellWords("go build && rm -rf /", nil); err == nil {
		t.Error("shellWords took a command list")
	}
	ig := parseDockerignore("# c\n.git\n**/*_test.go\n/e2e\nbench-*\n!bench-keep\n")
	for p, want := range map[string]bool{".git": true, ".git/HEAD": true, "main.go": false, "edge/edge_test.go": true,
		"edge_test.go": true, "e2e/x.go": true, "edge/e2e/x.go": false, "bench-1/a": true, "bench-keep": false} {
		if got := ig.excluded(p); got != want {
			t.Errorf(".dockerignore excludes %s = %v, want %v", p, got, want)
		}
	}
	stages, err := parseDockerfile("# syntax=docker/dockerfile:1\nARG X\nFROM --platform=$BUILDPLATFORM golang:1.26 AS build\nRUN a \\\n  # inside\n  b\nFROM scratch\nUSER 1:1\n")
	if err != nil || len(stages) != 2 || stages[0].name != "build" || stages[0].instrs[0].args != "a    b" || stages[1].instrs[0].args != "1:1" {
		var b bytes.Buffer
		for _, s := range stages {
			fmt.Fprintf(&b, "%+v\n", *s)
		}
		t.Errorf("parseDockerfile: %v\n%s", err, b.String())
	}
}
