package function

import (
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// stopExport and depthExport are the globals instrument adds. stopExport is the guest's
// fuel, which the host sets before each callback and the watchdog sets to 0 to stop it;
// depthExport is its call depth, which the host reads after a trap. A module may not
// export either name itself.
const (
	stopExport  = "tollgate_stop"
	depthExport = "tollgate_depth"
)

// fuelPerNS is the fuel a callback gets per nanosecond of its time budget.
const fuelPerNS = 4

// maxDepth bounds a guest's call depth, in frames of up to framePerLocals params and
// locals; a function with more counts one frame more per framePerLocals of them. Deep
// recursion grows wazero's native stack, memory outside the instance's limit, and the
// deadline alone let it grow for as long as it lasted (a 100 ms deadline, for 169 ms).
// A frame took 24 bytes of that stack with one parameter, 149 with 16 locals alive across
// the call, 3.4 KiB with 256 and 9 KiB with 1024 (2026-12-06, wazero 1.12's compiler on
// amd64, measured as the depth its 84 MB stack ceiling allowed), so a frame of 16 is at most
// 256 bytes and the limit at most 8 MiB of stack, a thread's usual. Functions built by Go's
// toolchain count one frame each or two (the hmac guest's 1994: a median of 4 params and
// locals, at most 18).
const (
	maxDepth       = 32768
	framePerLocals = 16
)

// depthDetail is the tenant's reason when a guest trapped because its call depth passed
// maxDepth.
var depthDetail = fmt.Sprintf("call depth over %d (a function counts one frame per %d params and locals)", maxDepth, framePerLocals)

// overDepth says whether mod's last trap was instrument's depth check. A trap leaves the
// depth global where the trap found it (no function exit ran to take its frames back),
// and only the check at a function's entry takes it past maxDepth.
func overDepth(mod api.Module) bool {
	g := mod.ExportedGlobal(depthExport)
	return g != nil && uint32(g.Get()) > maxDepth
}

// instrument rewrites a module so that it stops itself: it adds a mutable i64 global
// (fuel), exported as stopExport, and at the start of every function body and of every
// loop body the check "fuel -= 1; if fuel < 0: unreachable". The cut-off is then a trap
// at the next call or loop iteration, either because the watchdog set the fuel to 0 when
// the callback ran past its deadline, or because the fuel ran out by itself. The second
// needs no other goroutine: wazero's compiled code cannot be preempted, so on an edge
// whose every P runs guest code (one core, or as many guests as cores) nothing would run
// the watchdog, and a loop would hold its core for good. The host gives a callback
// fuelPerNS units per nanosecond of its budget: a tight loop runs about three checks a
// nanosecond here (2026-12-06: a 100 ms budget's loop ran out of one unit per ns in
// 35 ms with GOMAXPROCS=1), so a loop's fuel runs out at about its budget of CPU time,
// whatever else the machine runs meanwhile; the watchdog's wall-clock cut comes later
// (Config.WallFactor), for guests whose work the fuel undercounts.
// No call needs wazero's context watcher (WithCloseOnContextDone), which starts a
// goroutine per guest call: 14 of the 15 µs a no-op filter cost per request before this.
//
// It also adds an i32 global, the call depth, exported as depthExport: a function that
// calls adds its frames (see maxDepth) at entry, in the same check as the fuel ("if fuel <
// 0 or depth > maxDepth: unreachable"), and takes them back at every exit; one that calls
// nothing keeps the fuel check alone, as its frame is the last. Its body is wrapped in a
// block of its results, so a branch to its outermost label, br, br_if or br_table, lands
// before the one exit at its end; return and the tail calls take the frames back where
// they are. A function whose results are several values needs a block type [] -> results:
// one is appended to the type section when no type says so already.
//
// Function, global (the new ones are last) and type indices do not change, so the type
// section changes only at its end and otherwise only the code section is rewritten. Code
// that names a global past the module's own (the host's) is refused, and so are
// instructions it does not know (SIMD, threads, exceptions).
//
// Last, it adds the merged entries (see merge.go): functions appended after the module's
// own, with their globals and exports, that call several callbacks in one host entry.
func instrument(b []byte) ([]byte, error) {
	if len(b) < 8 || string(b[:4]) != "\x00asm" || string(b[4:8]) != "\x01\x00\x00\x00" {
		return nil, errors.New("not a WebAssembly 1.0 binary")
	}
	type section struct {
		id   byte
		body []byte
	}
	var secs []section
	r := &reader{b: b, off: 8}
	for r.off < len(r.b) {
		id := r.byte()
		n := r.u32()
		body := r.bytes(int(n))
		if r.err != nil {
			return nil, r.err
		}
		secs = append(secs, section{id, body})
	}
	for _, s := range secs {
		if err := preflight(s.id, s.body); err != nil {
			return nil, err
		}
	}
	var importedFuncs []uint32 // each imported function's type index
	importedGlobals, definedGlobals := uint32(0), uint32(0)
	rw := &rewriter{}
	var types, funcs, code []byte
	callbacks := map[string]uint32{} // exported functions named as proxy-wasm's callbacks
	for _, s := range secs {
		switch s.id {
		case 1:
			types = s.body
		case 2:
			fns, n, err := readImports(s.body)
			if err != nil {
				return nil, err
			}
			importedFuncs, importedGlobals = fns, n
		case 3:
			funcs = s.body
		case 6:
			sr := &reader{b: s.body}
			definedGlobals = sr.u32()
			if sr.err != nil {
				return nil, sr.err
			}
		case 7:
			sr := &reader{b: s.body}
			n := sr.u32()
			for i := uint32(0); i < n && sr.err == nil; i++ {
				name := sr.name()
				kind := sr.byte()
				idx := sr.u32()
				if reservedExport(name) {
					return nil, fmt.Errorf("exports %s, a name the host reserves", name)
				}
				if _, ok := guestExports[name]; ok && kind == 0 {
					callbacks[name] = idx
				}
			}
			if sr.err != nil {
				return nil, sr.err
			}
		case 10:
			code = s.body
		}
	}
	rw.stop = importedGlobals + definedGlobals
	rw.depth = rw.stop + 1
	rw.phase, rw.hold = rw.stop+2, rw.stop+3
	// global.get; i64.const 1; i64.sub; global.set; global.get; i64.const 0; i64.lt_s;
	// if; unreachable; end
	rw.fuelCheck = appendU32([]byte{0x23}, rw.stop)
	rw.fuelCheck = appendU32(append(rw.fuelCheck, 0x42, 0x01, 0x7d, 0x24), rw.stop)
	rw.fuelCheck = appendU32(append(rw.fuelCheck, 0x23), rw.stop)
	rw.fuelCheck = append(rw.fuelCheck, 0x42, 0x00, 0x53, 0x04, 0x40, 0x00, 0x0b)
	if err := rw.readTypes(types, funcs); err != nil {
		return nil, err
	}
	var bodies []byte // the rewritten function bodies, without their count
	if code != nil {
		var err error
		if bodies, err = rw.code(code); err != nil {
			return nil, err
		}
	}
	entries := rw.entries(callbacks, importedFuncs)
	firstEntry := uint32(len(importedFuncs) + len(rw.funcTypes))

	newGlobals := []byte{
		0x7e, 0x01, 0x42, 0x00, 0x0b, // fuel: mut i64 = 0
		0x7f, 0x01, 0x41, 0x00, 0x0b, // depth: mut i32 = 0
		0x7f, 0x01, 0x41, 0x00, 0x0b, // phase: mut i32 = 0
		0x7f, 0x01, 0x41, 0x00, 0x0b, // hold: mut i32 = 0
	}
	newExports := appendName(nil, stopExport)
	newExports = appendU32(append(newExports, 0x03), rw.stop)
	newExports = appendName(newExports, depthExport)
	newExports = appendU32(append(newExports, 0x03), rw.depth)
	newExports = appendName(newExports, phaseExport)
	newExports = appendU32(append(newExports, 0x03), rw.phase)
	newExports = appendName(newExports, holdExport)
	newExports = appendU32(append(newExports, 0x03), rw.hold)
	for i, e := range entries {
		newExports = appendName(newExports, entryNames[e.id])
		newExports = appendU32(append(newExports, 0x00), firstEntry+uint32(i))
	}
	const globalsAdded, exportsAdded = 4, 4

	// sectionBody is the body of section id with what instrument adds; orig is the module's
	// own, nil when it has none, and then a nil result means none is needed either.
	sectionBody := func(id byte, orig []byte) ([]byte, error) {
		n, rest := uint32(0), []byte(nil)
		if orig != nil {
			sr := &reader{b: orig}
			n = sr.u32()
			if sr.err != nil {
				return nil, sr.err
			}
			rest = orig[sr.off:]
		}
		var body []byte
		switch id {
		case 1:
			if orig == nil && len(rw.extraTypes) == 0 {
				return nil, nil
			}
			body = append(appendU32(nil, n+uint32(len(rw.extraTypes))), rest...)
			for _, t := range rw.extraTypes {
				body = appendU32(append(body, 0x60), uint32(len(t.params)))
				body = append(body, t.params...)
				body = appendU32(body, uint32(len(t.results)))
				body = append(body, t.results...)
			}
		case 3:
			if orig == nil && len(entries) == 0 {
				return nil, nil
			}
			body = append(appendU32(nil, n+uint32(len(entries))), rest...)
			for _, e := range entries {
				body = appendU32(body, e.typ)
			}
		case 6:
			body = append(appendU32(nil, n+globalsAdded), rest...)
			body = append(body, newGlobals...)
		case 7:
			body = append(appendU32(nil, n+exportsAdded+uint32(len(entries))), rest...)
			body = append(body, newExports...)
		case 10:
			if orig == nil && len(entries) == 0 {
				return nil, nil
			}
			body = append(appendU32(nil, n+uint32(len(entries))), bodies...)
			for _, e := range entries {
				body = appendU32(body, uint32(len(e.body)))
				body = append(body, e.body...)
			}
		}
		return body, nil
	}

	// The order sections must appear in, by id (custom sections excepted).
	rank := map[byte]int{1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 13: 6, 6: 7, 7: 8, 8: 9, 9: 10, 12: 11, 10: 12, 11: 13}
	out := append([]byte(nil), b[:8]...)
	emit := func(id byte, body []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	// The sections instrument adds to, in their order; one the module lacks is added
	// before the first section that must follow it.
	grown := []byte{1, 3, 6, 7, 10}
	seen := map[byte]bool{}
	flush := func(before int) error {
		for _, id := range grown {
			if seen[id] || before <= rank[id] {
				continue
			}
			seen[id] = true
			body, err := sectionBody(id, nil)
			if err != nil {
				return err
			}
			if body != nil {
				emit(id, body)
			}
		}
		return nil
	}
	for _, s := range secs {
		if s.id == 0 {
			emit(0, s.body)
			continue
		}
		rk, ok := rank[s.id]
		if !ok {
			return nil, fmt.Errorf("unknown section %d", s.id)
		}
		if err := flush(rk); err != nil {
			return nil, err
		}
		switch s.id {
		case 1, 3, 6, 7, 10:
			seen[s.id] = true
			body, err := sectionBody(s.id, s.body)
			if err != nil {
				return nil, err
			}
			emit(s.id, body)
		default:
			emit(s.id, s.body)
		}
	}
	if err := flush(1 << 30); err != nil {
		return nil, err
	}
	return out, nil
}

// readImports returns the type index of each imported function and the number of
// imported globals.
func readImports(b []byte) ([]uint32, uint32, error) {
	r := &reader{b: b}
	n := r.u32()
	var fns []uint32
	globals := uint32(0)
	for i := uint32(0); i < n && r.err == nil; i++ {
		r.name()
		r.name()
		switch kind := r.byte(); kind {
		case 0x00: // function
			fns = append(fns, r.u32())
		case 0x01: // table
			r.byte()
			r.limits()
		case 0x02: // memory
			r.limits()
		case 0x03: // global
			r.byte()
			r.byte()
			globals++
		default:
			return nil, 0, fmt.Errorf("import of kind %d is not supported", kind)
		}
	}
	return fns, globals, r.err
}

// rewriter holds what instrumenting one module's functions needs.
type rewriter struct {
	stop, depth uint32   // the fuel's and the depth's global indices
	phase, hold uint32   // the merged entries' globals (merge.go)
	types       []fnType // the type section
	funcTypes   []uint32 // each defined function's type index
	extraTypes  []fnType // types appended to the type section
	fuelCheck   []byte   // at the start of every loop body and of every leaf function
	scratch     []byte
}

type fnType struct {
	params, results []byte // value types, as the binary format writes them
}

func (rw *rewriter) readTypes(types, funcs []byte) error {
	r := &reader{b: types}
	if types != nil {
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.byte() // 0x60, checked by preflight
			params := r.bytes(int(r.u32()))
			results := r.bytes(int(r.u32()))
			rw.types = append(rw.types, fnType{params, results})
		}
		if r.err != nil {
			return r.err
		}
	}
	r = &reader{b: funcs}
	if funcs != nil {
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			rw.funcTypes = append(rw.funcTypes, r.u32())
		}
	}
	return r.err
}

// typeIndex is the index of the type params -> results, appended to the type section
// when the module has none.
func (rw *rewriter) typeIndex(params, results []byte) uint32 {
	for i, t := range rw.types {
		if string(t.params) == string(params) && string(t.results) == string(results) {
			return uint32(i)
		}
	}
	for i, t := range rw.extraTypes {
		if string(t.params) == string(params) && string(t.results) == string(results) {
			return uint32(len(rw.types) + i)
		}
	}
	rw.extraTypes = append(rw.extraTypes, fnType{params, results})
	return uint32(len(rw.types) + len(rw.extraTypes) - 1)
}

// blockType is the block type of a function's results.
func (rw *rewriter) blockType(out []byte, results []byte) []byte {
	switch len(results) {
	case 0:
		return append(out, 0x40)
	case 1:
		return append(out, results[0])
	}
	return appendS64(out, int64(rw.typeIndex(nil, results)))
}

// code rewrites the code section's function bodies and returns them without their count.
func (rw *rewriter) code(b []byte) ([]byte, error) {
	r := &reader{b: b}
	n := r.u32()
	if int(n) != len(rw.funcTypes) {
		return nil, fmt.Errorf("%d function bodies for %d functions", n, len(rw.funcTypes))
	}
	var out, body []byte
	for i := uint32(0); i < n; i++ {
		size := r.u32()
		fb := r.bytes(int(size))
		if r.err != nil {
			return nil, r.err
		}
		ti := rw.funcTypes[i]
		if int(ti) >= len(rw.types) {
			return nil, fmt.Errorf("function %d: type %d does not exist", i, ti)
		}
		var err error
		if body, err = rw.body(body[:0], fb, rw.types[ti]); err != nil {
			return nil, fmt.Errorf("function %d: %w", i, err)
		}
		out = appendU32(out, uint32(len(body)))
		out = append(out, body...)
	}
	if r.off != len(r.b) {
		return nil, errors.New("code section: trailing bytes")
	}
	return out, nil
}

func (rw *rewriter) body(out, b []byte, typ fnType) ([]byte, error) {
	r := &reader{b: b}
	groups := r.u32()
	locals := uint64(len(typ.params))
	for i := uint32(0); i < groups && r.err == nil; i++ {
		locals += uint64(r.u32())
		r.byte()
	}
	if r.err != nil {
		return nil, r.err
	}
	out = append(out, b[:r.off]...)
	code := b[r.off:]

	// A function that calls nothing (a leaf) cannot deepen the stack past its own frame:
	// it keeps the fuel check alone, the cost of every call before the depth check.
	var calls bool
	var err error
	rw.scratch, calls, err = rw.walk(rw.scratch[:0], code, nil)
	if err != nil {
		return nil, err
	}
	if !calls {
		out = append(out, rw.fuelCheck...)
		return append(out, rw.scratch...), nil
	}

	// preflight holds locals to maxLocals and a type's params to its bytes, so frames
	// stays far below 2^31, and the depth, which grows by at most that past maxDepth
	// before the check traps, stays an i32.
	frames := int64(1 + locals/framePerLocals)

	// global.get stop; i64.const 1; i64.sub; global.set stop;
	// global.get depth; i32.const frames; i32.add; global.set depth;
	// global.get stop; i64.const 0; i64.lt_s; global.get depth; i32.const maxDepth; i32.gt_u;
	// i32.or; if; unreachable; end; block results
	out = appendU32(append(out, 0x23), rw.stop)
	out = appendU32(append(out, 0x42, 0x01, 0x7d, 0x24), rw.stop)
	out = appendU32(append(out, 0x23), rw.depth)
	out = appendS64(append(out, 0x41), frames)
	out = appendU32(append(out, 0x6a, 0x24), rw.depth)
	out = appendU32(append(out, 0x23), rw.stop)
	out = appendU32(append(out, 0x42, 0x00, 0x53, 0x23), rw.depth)
	out = appendS64(append(out, 0x41), maxDepth)
	out = append(out, 0x4b, 0x72, 0x04, 0x40, 0x00, 0x0b, 0x02)
	out = rw.blockType(out, typ.results)

	// global.get depth; i32.const frames; i32.sub; global.set depth
	exit := appendU32([]byte{0x23}, rw.depth)
	exit = appendS64(append(exit, 0x41), frames)
	exit = appendU32(append(exit, 0x6b, 0x24), rw.depth)
	if out, _, err = rw.walk(out, code, exit); err != nil {
		return nil, err
	}
	// The body's own end closed the block: what follows is the function's one exit.
	out = append(out, exit...)
	return append(out, 0x0b), nil
}

// walk appends a function's instructions to out with the fuel check at the start of every
// loop body and exit before every return and tail call, and says whether it calls.
func (rw *rewriter) walk(out, b []byte, exit []byte) ([]byte, bool, error) {
	r := &reader{b: b}
	calls := false
	for r.off < len(r.b) {
		start := r.off
		op := r.byte()
		loop := false
		switch {
		case op == 0x02 || op == 0x04: // block, if
			r.blockType()
		case op == 0x03: // loop
			r.blockType()
			loop = true
		case op == 0x0f: // return
			out = append(out, exit...)
		case op <= 0x01, op == 0x05, op == 0x0b, op == 0x1a, op == 0x1b,
			op >= 0x45 && op <= 0xc4, op == 0xd1:
		case op == 0x10: // call
			r.u32()
			calls = true
		case op == 0x12: // return_call
			r.u32()
			out = append(out, exit...)
			calls = true
		case op == 0x23, op == 0x24: // global.get, global.set
			if g := r.u32(); g >= rw.stop && r.err == nil {
				return nil, false, fmt.Errorf("global %d does not exist", g)
			}
		case op == 0x0c, op == 0x0d, op >= 0x20 && op <= 0x26,
			op == 0x3f, op == 0x40, op == 0xd2:
			r.u32()
		case op == 0x0e: // br_table
			n := r.u32()
			for j := uint32(0); j <= n && r.err == nil; j++ {
				r.u32()
			}
		case op == 0x11: // call_indirect
			r.u32()
			r.u32()
			calls = true
		case op == 0x13: // return_call_indirect
			r.u32()
			r.u32()
			out = append(out, exit...)
			calls = true
		case op == 0x1c: // select t*
			n := r.u32()
			r.bytes(int(n))
		case op >= 0x28 && op <= 0x3e: // loads and stores
			if align := r.u32(); align&0x40 != 0 {
				r.u32()
			}
			r.u32()
		case op == 0x41:
			r.s64()
		case op == 0x42:
			r.s64()
		case op == 0x43:
			r.bytes(4)
		case op == 0x44:
			r.bytes(8)
		case op == 0xd0:
			r.byte()
		case op == 0xfc:
			switch sub := r.u32(); {
			case sub <= 7:
			case sub == 8, sub == 10, sub == 12, sub == 14:
				r.u32()
				r.u32()
			case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17:
				r.u32()
			default:
				return nil, false, fmt.Errorf("instruction 0xfc %d is not supported", sub)
			}
		default:
			return nil, false, fmt.Errorf("instruction %#x is not supported (SIMD, threads and exceptions are not run here)", op)
		}
		if r.err != nil {
			return nil, false, r.err
		}
		out = append(out, r.b[start:r.off]...)
		if loop {
			out = append(out, rw.fuelCheck...)
		}
	}
	return out, calls, nil
}

// reader decodes the binary format; the first error sticks and every read after it
// returns zero values, so callers check err once.
type reader struct {
	b   []byte
	off int
	err error
}

var errTruncated = errors.New("truncated or malformed module")

func (r *reader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil || n < 0 || n > len(r.b)-r.off {
		r.err = errTruncated
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u64(maxBytes int) uint64 {
	var v uint64
	for i := 0; i < maxBytes; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.err = errTruncated
	return 0
}

func (r *reader) u32() uint32 { return uint32(r.u64(5)) }
func (r *reader) s64()        { r.u64(10) }

func (r *reader) name() string {
	n := r.u32()
	return string(r.bytes(int(n)))
}

func (r *reader) limits() {
	flags := r.byte()
	r.u64(10)
	if flags&1 != 0 {
		r.u64(10)
	}
}

// skipConstExpr reads a constant expression up to its end.
func (r *reader) skipConstExpr() {
	for r.err == nil {
		switch op := r.byte(); op {
		case 0x0b:
			return
		case 0x41, 0x42:
			r.u64(10)
		case 0x43:
			r.bytes(4)
		case 0x44:
			r.bytes(8)
		case 0x23, 0xd2:
			r.u32()
		case 0xd0:
			r.byte()
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant expressions
		default:
			if r.err == nil {
				r.err = fmt.Errorf("instruction %#x in a constant expression", op)
			}
		}
	}
}

func (r *reader) blockType() {
	if r.err != nil || r.off >= len(r.b) {
		r.err = errTruncated
		return
	}
	switch r.b[r.off] {
	case 0x40, 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		r.off++
	default:
		r.u64(5) // a type index, as a signed 33-bit number
	}
}

func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendS64 appends v as a signed LEB128, the encoding of i32.const's operand and of a
// block's type index.
func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

func appendName(b []byte, s string) []byte {
	return append(appendU32(b, uint32(len(s))), s...)
}

// maxLocals bounds one function's declared locals; maxTableSize a table's initial size
// (8 MiB of references: Go's toolchain makes tables of a few thousand).
const (
	maxLocals    = 1 << 16
	maxTableSize = 1 << 20
)

// preflight holds a section's declared counts to what its bytes can hold. wazero sizes
// its slices from the counts a module declares before reading the entries, so a module of
// a few bytes declaring 2^32 imports made it allocate until the process died (found by
// FuzzInstrument); every module reaches wazero only after this check.
func preflight(id byte, b []byte) error {
	switch id {
	case 0, 8, 12: // custom, start, data count: no vector
		return nil
	}
	r := &reader{b: b}
	n := r.u32()
	if r.err != nil {
		return r.err
	}
	if uint64(n) > uint64(len(b)-r.off) {
		return fmt.Errorf("section %d declares %d entries in %d bytes", id, n, len(b))
	}
	switch id {
	case 1: // types: 0x60, params, results
		for i := uint32(0); i < n && r.err == nil; i++ {
			if form := r.byte(); form != 0x60 && r.err == nil {
				return fmt.Errorf("type %d: form %#x is not a function type", i, form)
			}
			for range 2 {
				k := r.u32()
				r.bytes(int(k))
			}
		}
	case 2:
		_, _, err := readImports(b)
		return err
	case 4: // tables: wazero allocates a table's minimum size when instantiating
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.byte()
			flags := r.byte()
			if m := r.u64(10); m > maxTableSize {
				return fmt.Errorf("table %d starts with %d elements (at most %d)", i, m, maxTableSize)
			}
			if flags&1 != 0 {
				r.u64(10)
			}
		}
	case 9: // elements: wazero sizes each segment's vector from its count
		for i := uint32(0); i < n && r.err == nil; i++ {
			flags := r.u32()
			if flags > 7 {
				return fmt.Errorf("element segment %d: flags %d", i, flags)
			}
			if flags&3 == 2 {
				r.u32() // table
			}
			if flags&1 == 0 {
				r.skipConstExpr()
			}
			if flags&3 != 0 {
				r.byte() // element kind or reference type
			}
			k := r.u32()
			if r.err == nil && uint64(k) > uint64(len(b)-r.off) {
				return fmt.Errorf("element segment %d declares %d entries", i, k)
			}
			for j := uint32(0); j < k && r.err == nil; j++ {
				if flags&4 == 0 {
					r.u32()
				} else {
					r.skipConstExpr()
				}
			}
		}
	case 11: // data: wazero allocates each segment's declared size
		for i := uint32(0); i < n && r.err == nil; i++ {
			flags := r.u32()
			switch flags {
			case 0:
				r.skipConstExpr()
			case 1:
			case 2:
				r.u32()
				r.skipConstExpr()
			default:
				return fmt.Errorf("data segment %d: flags %d", i, flags)
			}
			k := r.u32()
			r.bytes(int(k))
		}
	case 10: // code: each body's locals
		for i := uint32(0); i < n && r.err == nil; i++ {
			size := r.u32()
			body := r.bytes(int(size))
			if r.err != nil {
				break
			}
			br := &reader{b: body}
			groups := br.u32()
			if uint64(groups) > uint64(len(body)) {
				return fmt.Errorf("function %d declares %d groups of locals in %d bytes", i, groups, len(body))
			}
			total := uint64(0)
			for j := uint32(0); j < groups && br.err == nil; j++ {
				total += uint64(br.u32())
				br.byte()
			}
			if br.err != nil {
				return br.err
			}
			if total > maxLocals {
				return fmt.Errorf("function %d declares %d locals (at most %d)", i, total, maxLocals)
			}
		}
	}
	return r.err
}
