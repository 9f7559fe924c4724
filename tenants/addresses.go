package tenants

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
)

// What the upstream address policy does with an address in a special range.
const (
	// rangeRefused: not globally reachable; refused unless TOLLGATE_UPSTREAM_ALLOW_CIDRS
	// names the address.
	rangeRefused = iota
	// rangeNever: names no single remote host (unspecified, broadcast, multicast), so
	// no allow list re-admits it: 0.0.0.0 and :: connect to the gateway's own machine.
	rangeNever
	// rangeGlobal: a globally reachable block; inside a refused block it is an
	// exception that stays allowed.
	rangeGlobal
	// rangeEmbeds: an IPv6 form that carries an IPv4 address the packet really goes to
	// (by the kernel, a tunnel or a translator); the IPv4 address decides.
	rangeEmbeds
)

// specialRange is one row of the address table.
type specialRange struct {
	prefix netip.Prefix
	name   string
	rfc    string
	kind   int
	// embedAt is the bit offset of the embedded IPv4 address of a rangeEmbeds form.
	embedAt int
	// The prefix as 128-bit value and mask (an IPv4 prefix in its IPv4-mapped form),
	// so a lookup is two masked compares per entry.
	hi, lo, mhi, mlo uint64
}

func (r *specialRange) contains(hi, lo uint64) bool {
	return hi&r.mhi == r.hi && lo&r.mlo == r.lo
}

// split128 returns a (IPv4 in its IPv4-mapped form) as two 64-bit halves.
func split128(a netip.Addr) (hi, lo uint64) {
	b := a.As16()
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}

func sr(prefix, name, rfc string, kind int) specialRange {
	p := netip.MustParsePrefix(prefix)
	r := specialRange{prefix: p, name: name, rfc: rfc, kind: kind}
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	r.mhi, r.mlo = ^uint64(0), ^uint64(0)
	if bits < 64 {
		r.mhi, r.mlo = ^(^uint64(0) >> bits), 0
	} else if bits < 128 {
		r.mlo = ^(^uint64(0) >> (bits - 64))
	}
	r.hi, r.lo = split128(p.Addr())
	r.hi &= r.mhi
	r.lo &= r.mlo
	return r
}

func embeds(prefix, name, rfc string, at int) specialRange {
	r := sr(prefix, name, rfc, rangeEmbeds)
	r.embedAt = at
	return r
}

// specialRanges is every entry of IANA's IPv4 and IPv6 Special-Purpose Address
// Registries (as of 2025), in registry order, plus the ranges those registries leave
// to others: multicast, class E, the IPv6 space outside global unicast, and the IPv6
// forms that embed an IPv4 address. Blocks the registries mark globally reachable are
// listed too, so that the exceptions inside a refused block (192.0.0.9 inside
// 192.0.0.0/24, 2001:1::1 inside 2001::/23…) are visible here and win by being more
// specific. The most specific entry containing an address decides it.
var specialRanges = []specialRange{
	// IPv4 Special-Purpose Address Registry.
	sr("0.0.0.0/8", `"this network"`, "RFC 791", rangeRefused),
	sr("0.0.0.0/32", "unspecified (this host on this network)", "RFC 1122", rangeNever),
	sr("10.0.0.0/8", "private-use", "RFC 1918", rangeRefused),
	sr("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598", rangeRefused),
	sr("127.0.0.0/8", "loopback", "RFC 1122", rangeRefused),
	sr("169.254.0.0/16", "link-local (cloud metadata services live here)", "RFC 3927", rangeRefused),
	sr("172.16.0.0/12", "private-use", "RFC 1918", rangeRefused),
	sr("192.0.0.0/24", "IETF protocol assignments", "RFC 6890", rangeRefused),
	sr("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335", rangeRefused),
	sr("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", rangeRefused),
	sr("192.0.0.9/32", "Port Control Protocol anycast", "RFC 7723", rangeGlobal),
	sr("192.0.0.10/32", "TURN anycast", "RFC 8155", rangeGlobal),
	sr("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880", rangeRefused),
	sr("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880", rangeRefused),
	sr("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737", rangeRefused),
	sr("192.31.196.0/24", "AS112-v4", "RFC 7535", rangeGlobal),
	sr("192.52.193.0/24", "AMT", "RFC 7450", rangeGlobal),
	sr("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526", rangeRefused),
	sr("192.88.99.2/32", "6a44 relay anycast", "RFC 6751", rangeRefused),
	sr("192.168.0.0/16", "private-use", "RFC 1918", rangeRefused),
	sr("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534", rangeGlobal),
	sr("198.18.0.0/15", "benchmarking", "RFC 2544", rangeRefused),
	sr("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737", rangeRefused),
	sr("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737", rangeRefused),
	sr("240.0.0.0/4", "reserved (class E)", "RFC 1112", rangeRefused),
	sr("255.255.255.255/32", "limited broadcast", "RFC 919", rangeNever),
	// IPv4 multicast, which has a registry of its own.
	sr("224.0.0.0/4", "multicast", "RFC 5771", rangeNever),

	// IPv6 Special-Purpose Address Registry.
	sr("::1/128", "loopback", "RFC 4291", rangeRefused),
	sr("::/128", "unspecified", "RFC 4291", rangeNever),
	embeds("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", 96),
	embeds("64:ff9b::/96", "IPv4/IPv6 translation (NAT64)", "RFC 6052", 96),
	sr("64:ff9b:1::/48", "local-use IPv4/IPv6 translation", "RFC 8215", rangeRefused),
	sr("100::/64", "discard-only", "RFC 6666", rangeRefused),
	sr("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780", rangeRefused),
	sr("2001::/23", "IETF protocol assignments", "RFC 2928", rangeRefused),
	// Teredo carries its server's IPv4 address in bits 32–63 and the client's, inverted,
	// in bits 96–127; the whole block is refused, so neither needs decoding.
	sr("2001::/32", "Teredo", "RFC 4380", rangeRefused),
	sr("2001:1::1/128", "Port Control Protocol anycast", "RFC 7723", rangeGlobal),
	sr("2001:1::2/128", "TURN anycast", "RFC 8155", rangeGlobal),
	sr("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665", rangeGlobal),
	sr("2001:2::/48", "benchmarking", "RFC 5180", rangeRefused),
	sr("2001:3::/32", "AMT", "RFC 7450", rangeGlobal),
	sr("2001:4:112::/48", "AS112-v6", "RFC 7535", rangeGlobal),
	sr("2001:10::/28", "deprecated ORCHID", "RFC 4843", rangeRefused),
	sr("2001:20::/28", "ORCHIDv2", "RFC 7343", rangeGlobal),
	sr("2001:30::/28", "drone remote ID entity tags", "RFC 9374", rangeGlobal),
	sr("2001:db8::/32", "documentation", "RFC 3849", rangeRefused),
	embeds("2002::/16", "6to4", "RFC 3056", 16),
	sr("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534", rangeGlobal),
	sr("3fff::/20", "documentation", "RFC 9637", rangeRefused),
	sr("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602", rangeRefused),
	sr("fc00::/7", "unique-local", "RFC 4193", rangeRefused),
	sr("fe80::/10", "link-local", "RFC 4291", rangeRefused),
	// Not in the special-purpose registry: multicast, the forms that embed an IPv4
	// address, and the space IANA has not allocated for global unicast (site-local
	// fec0::/10 and every other block outside 2000::/3).
	sr("ff00::/8", "multicast", "RFC 4291", rangeNever),
	embeds("::/96", "IPv4-compatible (deprecated)", "RFC 4291", 96),
	embeds("::ffff:0:0:0/96", "IPv4-translated", "RFC 2765", 96),
	sr("::/0", "outside the global unicast space 2000::/3", "RFC 4291", rangeRefused),
	sr("2000::/3", "global unicast", "RFC 4291", rangeGlobal),
}

// special4 and special6 are the table by family, most specific first, so the first
// entry that contains an address is the one that decides it.
var special4, special6 = splitSpecial(specialRanges)

func splitSpecial(all []specialRange) (v4, v6 []specialRange) {
	for _, r := range all {
		if r.prefix.Addr().Is4() {
			v4 = append(v4, r)
		} else {
			v6 = append(v6, r)
		}
	}
	moreSpecific := func(a, b specialRange) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) }
	slices.SortStableFunc(v4, moreSpecific)
	slices.SortStableFunc(v6, moreSpecific)
	return v4, v6
}

// specialRangeOf returns the table entry deciding a (zone already removed), or nil for
// an ordinary globally reachable IPv4 address.
func specialRangeOf(a netip.Addr) *specialRange {
	table := special6
	if a.Is4() {
		table = special4
	}
	hi, lo := split128(a)
	for i := range table {
		if table[i].contains(hi, lo) {
			return &table[i]
		}
	}
	return nil
}

// embeddedIPv4 takes the 32 bits at bit offset at (a multiple of 8) out of a.
func embeddedIPv4(a netip.Addr, at int) netip.Addr {
	b := a.As16()
	var v4 [4]byte
	copy(v4[:], b[at/8:at/8+4])
	return netip.AddrFrom4(v4)
}

// isatapIPv4 returns the IPv4 address an ISATAP interface identifier (::0:5efe:a.b.c.d
// or ::200:5efe:a.b.c.d, RFC 5214) carries: on a host with an ISATAP interface for the
// prefix, the kernel sends such a packet straight to that IPv4 address.
func isatapIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	if b[8]&^0x02 != 0 || b[9] != 0 || b[10] != 0x5e || b[11] != 0xfe {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
}

func (r *specialRange) refusal(a netip.Addr) error {
	if r.kind == rangeNever {
		return fmt.Errorf("%s is in %s, %s (%s), which upstreams may not use: it names no single remote host", a, r.prefix, r.name, r.rfc)
	}
	return fmt.Errorf("%s is in %s, %s (%s), which upstreams may not use unless the operator allows it (TOLLGATE_UPSTREAM_ALLOW_CIDRS)", a, r.prefix, r.name, r.rfc)
}

// refusedIPv4 returns the entry that refuses the IPv4 address e, or nil.
func refusedIPv4(e netip.Addr) *specialRange {
	if r := specialRangeOf(e); r != nil && r.kind != rangeGlobal {
		return r
	}
	return nil
}
