package function

// Merged entries. Entering the guest costs the edge CPU every time (wazero's setup, its
// recover and trampoline, and exec's bookkeeping: about 18 ns on the development machine,
// 2026-12-08), and a request entered it six times: proxy_on_context_create, proxy_on_request_headers, proxy_on_response_headers,
// then proxy_on_done, proxy_on_log and proxy_on_delete. instrument adds functions that
// call several callbacks in a row inside the guest, so the host enters once where it
// entered two to four times (SetMergedEntries):
//
//   - tollgate_request_headers (ctx, root, n, eos) -> i32: proxy_on_context_create(ctx,
//     root), then proxy_on_request_headers(ctx, n, eos), whose result it returns.
//   - tollgate_response_headers_end and tollgate_response_body_end (ctx, n, eos) -> i32:
//     the response callback, then, unless it asked for a callout (whose answer's run
//     ends the context instead), proxy_on_done (its result dropped), proxy_on_log and
//     proxy_on_delete; it returns the response callback's result.
//   - tollgate_end (ctx): proxy_on_done, proxy_on_log, proxy_on_delete.
//
// An entry calls only the callbacks the module exports with the types proxy-wasm gives
// them (a module exporting one with another type is refused by checkABI anyway), and is
// added only where it saves an entry: two calls at least.
//
// Two globals tie an entry to the host. The entry sets tollgate_phase to the callback it
// is about to call (the cb constants), so a trap, a timeout or a bad host call names the
// callback that was running, and the host tells from it whether the end ran.
// tollgate_hold is zeroed by the entry and raised by the host: holdCallout when
// proxy_http_call queues a callout, holdFailed at a bad host call (instance.fail), which
// the guest survives today but after which no further callback may run. The entry checks
// it between calls. Neither is the fuel, which the watchdog owns while it cuts a run.
// Callbacks keep their own fuel and depth checks; an entry has no loop and adds one
// frame, so it needs neither.

const (
	phaseExport = "tollgate_phase"
	holdExport  = "tollgate_hold"
)

// The bits of tollgate_hold.
const (
	holdCallout = 1 // a callout is queued: the context must not end in this entry
	holdFailed  = 2 // a bad host call: no further callback may run
)

// The merged entries, indexing instance.entries.
const (
	entryRequest = iota
	entryResponseHeaders
	entryResponseBody
	entryEnd
	entryCount
)

var entryNames = [entryCount]string{
	"tollgate_request_headers", "tollgate_response_headers_end", "tollgate_response_body_end", "tollgate_end",
}

// reservedExport says whether a module may not export name: instrument adds it.
func reservedExport(name string) bool {
	switch name {
	case stopExport, depthExport, phaseExport, holdExport:
		return true
	}
	for _, n := range entryNames {
		if name == n {
			return true
		}
	}
	return false
}

// entry is a merged entry to add: which, its type index and its body.
type entry struct {
	id   int
	typ  uint32
	body []byte
}

var (
	entryParams4 = []byte{0x7f, 0x7f, 0x7f, 0x7f}
	entryParams3 = entryParams4[:3]
	entryParams1 = entryParams4[:1]
	entryResult  = []byte{0x7f}
)

// entries writes the merged entries a module's exported callbacks allow. exports maps the
// names of guestExports a module exports as functions to their indices; imported is
// each imported function's type index.
func (rw *rewriter) entries(exports map[string]uint32, imported []uint32) []entry {
	// fn is callback cb's function index, when exported with proxy-wasm's type.
	fn := func(cb int) (uint32, bool) {
		name := cbNames[cb]
		idx, ok := exports[name]
		if !ok {
			return 0, false
		}
		var ti uint32
		switch {
		case uint64(idx) < uint64(len(imported)):
			ti = imported[idx]
		case uint64(idx)-uint64(len(imported)) < uint64(len(rw.funcTypes)):
			ti = rw.funcTypes[idx-uint32(len(imported))]
		default:
			return 0, false
		}
		if uint64(ti) >= uint64(len(rw.types)) {
			return 0, false
		}
		t, want := rw.types[ti], guestExports[name]
		return idx, string(t.params) == string(want.params) && string(t.results) == string(want.results)
	}
	type call struct {
		cb int
		fn uint32
	}
	var end []call
	for _, cb := range [...]int{cbDone, cbLog, cbDelete} {
		if f, ok := fn(cb); ok {
			end = append(end, call{cb, f})
		}
	}
	var out []entry
	w := &entryWriter{phase: rw.phase, hold: rw.hold}

	create, ok1 := fn(cbContextCreate)
	headers, ok2 := fn(cbRequestHeaders)
	if ok1 && ok2 {
		w.start()
		w.call(cbContextCreate, create, 0, 1)
		w.stopIf(holdFailed, 0x41, 0x00) // i32.const 0: the host reads the failure
		w.call(cbRequestHeaders, headers, 0, 2, 3)
		out = append(out, entry{entryRequest, rw.typeIndex(entryParams4, entryResult), w.finish()})
	}

	for _, e := range [...]struct{ id, cb int }{{entryResponseHeaders, cbResponseHeaders}, {entryResponseBody, cbResponseBody}} {
		f, ok := fn(e.cb)
		if !ok || len(end) == 0 {
			continue
		}
		// The callback's result is kept in its n parameter (local 1), which it no longer needs.
		w.start()
		w.call(e.cb, f, 0, 1, 2)
		w.b = append(w.b, 0x21, 0x01) // local.set 1
		w.stopIf(holdCallout|holdFailed, 0x20, 0x01)
		for i, c := range end {
			if i > 0 {
				w.stopIf(holdFailed, 0x20, 0x01)
			}
			w.call(c.cb, c.fn, 0)
			if c.cb == cbDone {
				w.b = append(w.b, 0x1a) // drop
			}
		}
		w.b = append(w.b, 0x20, 0x01) // local.get 1
		out = append(out, entry{e.id, rw.typeIndex(entryParams3, entryResult), w.finish()})
	}

	if len(end) >= 2 {
		w.start()
		for i, c := range end {
			if i > 0 {
				w.stopIf(holdFailed)
			}
			w.call(c.cb, c.fn, 0)
			if c.cb == cbDone {
				w.b = append(w.b, 0x1a)
			}
		}
		out = append(out, entry{entryEnd, rw.typeIndex(entryParams1, nil), w.finish()})
	}
	return out
}

// entryWriter writes one merged entry's body.
type entryWriter struct {
	b           []byte
	phase, hold uint32
}

// start begins a body: no locals; hold = 0.
func (w *entryWriter) start() {
	w.b = appendU32(append(w.b[:0], 0x00, 0x41, 0x00, 0x24), w.hold)
}

// call sets the phase to cb and calls fn with the entry's params locals.
func (w *entryWriter) call(cb int, fn uint32, locals ...byte) {
	w.b = appendS64(append(w.b, 0x41), int64(cb))
	w.b = appendU32(append(w.b, 0x24), w.phase)
	for _, l := range locals {
		w.b = append(w.b, 0x20, l)
	}
	w.b = appendU32(append(w.b, 0x10), fn)
}

// stopIf returns from the entry, with the value result pushes, when hold has any of bits.
func (w *entryWriter) stopIf(bits int64, result ...byte) {
	w.b = appendU32(append(w.b, 0x23), w.hold)
	w.b = appendS64(append(w.b, 0x41), bits)
	w.b = append(w.b, 0x71, 0x04, 0x40) // i32.and; if
	w.b = append(w.b, result...)
	w.b = append(w.b, 0x0f, 0x0b) // return; end
}

func (w *entryWriter) finish() []byte {
	return append(append([]byte(nil), w.b...), 0x0b)
}
