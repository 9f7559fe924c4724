package tenants

import (
	"net/netip"
	"os"
	"strings"
	"testing"
)

// One address inside every entry of the table: refused naming that entry's range, name
// and RFC, or allowed for the globally reachable ones. The test fails when an entry has
// no case, so a row added to the table needs a case here.
func TestSpecialRanges(t *testing.T) {
	cases := []struct {
		addr  string
		entry string // the prefix of the deciding entry
		ok    bool   // allowed by the zero policy
	}{
		// IPv4 Special-Purpose Address Registry.
		{"0.1.2.3", "0.0.0.0/8", false},
		{"0.0.0.0", "0.0.0.0/32", false},
		{"10.20.30.40", "10.0.0.0/8", false},
		{"100.64.0.1", "100.64.0.0/10", false},
		{"100.127.255.254", "100.64.0.0/10", false},
		{"127.0.0.1", "127.0.0.0/8", false},
		{"127.255.255.254", "127.0.0.0/8", false},
		{"169.254.169.254", "169.254.0.0/16", false},
		{"172.16.0.1", "172.16.0.0/12", false},
		{"172.31.255.255", "172.16.0.0/12", false},
		{"192.0.0.200", "192.0.0.0/24", false},
		{"192.0.0.1", "192.0.0.0/29", false},
		{"192.0.0.8", "192.0.0.8/32", false},
		{"192.0.0.9", "192.0.0.9/32", true},
		{"192.0.0.10", "192.0.0.10/32", true},
		{"192.0.0.170", "192.0.0.170/32", false},
		{"192.0.0.171", "192.0.0.171/32", false},
		{"192.0.2.1", "192.0.2.0/24", false},
		{"192.31.196.1", "192.31.196.0/24", true},
		{"192.52.193.1", "192.52.193.0/24", true},
		{"192.88.99.1", "192.88.99.0/24", false},
		{"192.88.99.2", "192.88.99.2/32", false},
		{"192.168.1.1", "192.168.0.0/16", false},
		{"192.175.48.1", "192.175.48.0/24", true},
		{"198.18.0.1", "198.18.0.0/15", false},
		{"198.19.255.255", "198.18.0.0/15", false},
		{"198.51.100.7", "198.51.100.0/24", false},
		{"203.0.113.9", "203.0.113.0/24", false},
		{"240.0.0.1", "240.0.0.0/4", false},
		{"255.255.255.254", "240.0.0.0/4", false},
		{"255.255.255.255", "255.255.255.255/32", false},
		{"224.0.0.1", "224.0.0.0/4", false},
		{"239.255.255.250", "224.0.0.0/4", false},

		// IPv6 Special-Purpose Address Registry.
		{"::1", "::1/128", false},
		{"::", "::/128", false},
		{"::ffff:127.0.0.1", "::ffff:0:0/96", false},
		{"64:ff9b::a00:1", "64:ff9b::/96", false},
		{"64:ff9b::808:808", "64:ff9b::/96", true},
		{"64:ff9b:1::1", "64:ff9b:1::/48", false},
		{"100::1", "100::/64", false},
		{"100:0:0:1::1", "100:0:0:1::/64", false},
		{"2001:1::4", "2001::/23", false},
		{"2001:1ff::1", "2001::/23", false},
		{"2001::1", "2001::/32", false},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/32", false},
		{"2001:1::1", "2001:1::1/128", true},
		{"2001:1::2", "2001:1::2/128", true},
		{"2001:1::3", "2001:1::3/128", true},
		{"2001:2::1", "2001:2::/48", false},
		{"2001:3::1", "2001:3::/32", true},
		{"2001:4:112::1", "2001:4:112::/48", true},
		{"2001:10::1", "2001:10::/28", false},
		{"2001:20::1", "2001:20::/28", true},
		{"2001:30::1", "2001:30::/28", true},
		{"2001:db8::1", "2001:db8::/32", false},
		{"2002:7f00:1::1", "2002::/16", false},
		{"2002:808:808::1", "2002::/16", true},
		{"2620:4f:8000::1", "2620:4f:8000::/48", true},
		{"3fff::1", "3fff::/20", false},
		{"3fff:fff:ffff::1", "3fff::/20", false},
		{"5f00::1", "5f00::/16", false},
		{"fc00::1", "fc00::/7", false},
		{"fd12:3456::1", "fc00::/7", false},
		{"fe80::1", "fe80::/10", false},
		{"febf::1", "fe80::/10", false},

		// Beyond the registries.
		{"ff02::1", "ff00::/8", false},
		{"::127.0.0.1", "::/96", false},
		{"::8.8.8.8", "::/96", true},
		{"::ffff:0:7f00:1", "::ffff:0:0:0/96", false},
		{"::ffff:0:808:808", "::ffff:0:0:0/96", true},
		{"fec0::1", "::/0", false},
		{"4000::1", "::/0", false},
		{"2606:4700:4700::1111", "2000::/3", true},
		{"3fff:1000::1", "2000::/3", true},
	}
	covered := map[*specialRange]bool{}
	for _, tc := range cases {
		a := netip.MustParseAddr(tc.addr)
		r := specialRangeOf(a)
		if r == nil || r.prefix != netip.MustParsePrefix(tc.entry) {
			t.Errorf("%s: decided by %+v, want %s", tc.addr, r, tc.entry)
			continue
		}
		covered[r] = true
		err := (&UpstreamAddressRule{}).CheckAddr(a, 443)
		if tc.ok {
			if err != nil {
				t.Errorf("%s (%s, %s): refused: %v", tc.addr, r.prefix, r.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s (%s, %s): allowed", tc.addr, r.prefix, r.name)
			continue
		}
		msg := err.Error()
		if r.kind != rangeEmbeds && !strings.Contains(msg, r.prefix.String()+", "+r.name+" ("+r.rfc+")") {
			t.Errorf("%s: the refusal does not name %s, %s (%s): %s", tc.addr, r.prefix, r.name, r.rfc, msg)
		}
		if r.kind == rangeEmbeds && !strings.Contains(msg, r.name+" ("+r.rfc+") and embeds") {
			t.Errorf("%s: the refusal does not name the %s form: %s", tc.addr, r.name, msg)
		}
	}
	for i := range specialRanges {
		r := &specialRanges[i]
		found := false
		for c := range covered {
			if c.prefix == r.prefix {
				found = true
			}
		}
		if !found {
			t.Errorf("no test case for %s (%s)", r.prefix, r.name)
		}
	}
}

// The IPv6 forms that carry an IPv4 address are judged by it, and say which it is.
func TestEmbeddedIPv4(t *testing.T) {
	for addr, want := range map[string]string{
		"::ffff:127.0.0.1":   "127.0.0.1 is in 127.0.0.0/8, loopback",
		"::ffff:10.1.2.3":    "10.1.2.3 is in 10.0.0.0/8, private-use",
		"::127.0.0.1":        "127.0.0.1 is in 127.0.0.0/8, loopback",
		"::169.254.169.254":  "169.254.169.254 is in 169.254.0.0/16, link-local",
		"64:ff9b::a00:1":     "10.0.0.1 is in 10.0.0.0/8, private-use",
		"64:ff9b::7f00:1":    "127.0.0.1 is in 127.0.0.0/8, loopback",
		"64:ff9b::a9fe:a9fe": "169.254.169.254 is in 169.254.0.0/16",
		"2002:7f00:1::1":     "127.0.0.1 is in 127.0.0.0/8, loopback",
		"2002:a9fe:a9fe::":   "169.254.169.254 is in 169.254.0.0/16",
		"2002:c0a8:101:1::5": "192.168.1.1 is in 192.168.0.0/16, private-use",
		"::ffff:0:a00:1":     "10.0.0.1 is in 10.0.0.0/8",
		"::ffff:224.0.0.1":   "224.0.0.1 is in 224.0.0.0/4, multicast (RFC 5771), which upstreams may not use: it names no single remote host",
		"::ffff:0.0.0.0":     "names no single remote host",
		// ISATAP interface ids, u/l bit clear and set.
		"2606:4700::5efe:a00:1":      "has an ISATAP interface id (RFC 5214) that embeds 10.0.0.1",
		"2606:4700::200:5efe:7f00:1": "embeds 127.0.0.1: 127.0.0.1 is in 127.0.0.0/8, loopback",
	} {
		err := (&UpstreamAddressRule{}).CheckAddr(netip.MustParseAddr(addr), 443)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: want an error with %q, got %v", addr, want, err)
		}
	}
	for _, addr := range []string{"::ffff:8.8.8.8", "64:ff9b::808:808", "64:ff9b::1.1.1.1", "2002:808:808::1", "2606:4700::5efe:808:808", "2606:4700::5efe:c000:9"} {
		if err := (&UpstreamAddressRule{}).CheckAddr(netip.MustParseAddr(addr), 443); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

// TOLLGATE_UPSTREAM_ALLOW_CIDRS re-admits what it names, and no more; never an address
// that names no single host. A re-admitted address on one of the gateway's ports is
// refused as the gateway itself.
func TestAllowCIDRs(t *testing.T) {
	p := &UpstreamAddressRule{
		AllowCIDRs: []netip.Prefix{
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8"),
			netip.MustParsePrefix("198.18.0.0/16"), netip.MustParsePrefix("0.0.0.0/0"),
			netip.MustParsePrefix("ff00::/8"), netip.MustParsePrefix("::/128"),
		},
		GatewayPorts: []int{8000},
	}
	for _, addr := range []string{
		"10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a00:1", "2002:a00:1::1", "fd00::1", "198.18.0.1",
		"127.0.0.1", "169.254.169.254", "192.0.2.1",
	} {
		if err := p.CheckAddr(netip.MustParseAddr(addr), 443); err != nil {
			t.Errorf("%s re-admitted: %v", addr, err)
		}
	}
	for _, tc := range []struct {
		addr string
		port int
		want string
	}{
		{"fc00::1", 443, "unique-local"},
		{"fe80::1%eth0", 443, "link-local"},
		{"0.0.0.0", 443, "names no single remote host"},
		{"224.0.0.1", 443, "multicast"},
		{"ff02::1", 443, "multicast"},
		{"::", 443, "unspecified"},
		{"255.255.255.255", 443, "limited broadcast"},
		{"10.0.0.1", 8000, "10.0.0.1:8000 is one of the gateway's own ports"},
		{"64:ff9b::a00:1", 8000, "gateway's own ports"},
	} {
		err := p.CheckAddr(netip.MustParseAddr(tc.addr), tc.port)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s port %d: want an error with %q, got %v", tc.addr, tc.port, tc.want, err)
		}
	}
}

// CheckAddr runs on every upstream dial: an allowed address costs no allocation.
func TestCheckAddrAllocs(t *testing.T) {
	p := &UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, GatewayPorts: []int{8000}}
	for _, s := range []string{"8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "127.0.0.1", "192.0.0.9", "2001:1::1"} {
		a := netip.MustParseAddr(s)
		if n := testing.AllocsPerRun(100, func() { _ = p.CheckAddr(a, 443) }); n != 0 {
			t.Errorf("%s: %v allocations", s, n)
		}
	}
}

func BenchmarkCheckAddr(b *testing.B) {
	p := &UpstreamAddressRule{}
	for _, s := range []string{"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "10.0.0.1"} {
		a := netip.MustParseAddr(s)
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = p.CheckAddr(a, 443)
			}
		})
	}
}

// An independent judgement: the lookup finds the most specific entry (as a plain scan
// with netip.Prefix.Contains does); whatever the table allows, netip agrees is global unicast
// and not private, loopback or link-local; an IPv4-mapped address gets its IPv4
// address's verdict; and an allow list naming exactly a refused address re-admits it
// unless it names no single host.
func FuzzCheckAddr(f *testing.F) {
	for _, s := range []string{"8.8.8.8", "127.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:7f00:1::1",
		"2001:1::1", "2001::1", "fe80::1", "::", "255.255.255.255", "192.0.0.9", "2606:4700::5efe:a00:1", "3fff::1"} {
		b := netip.MustParseAddr(s).As16()
		f.Add(b[:], netip.MustParseAddr(s).Is4())
	}
	zero := &UpstreamAddressRule{}
	f.Fuzz(func(t *testing.T, raw []byte, is4 bool) {
		if len(raw) != 16 {
			return
		}
		a := netip.AddrFrom16([16]byte(raw))
		if is4 {
			a = a.Unmap()
			if !a.Is4() {
				return
			}
		}
		var slow *specialRange
		for i := range specialRanges {
			r := &specialRanges[i]
			if r.prefix.Contains(a) && (slow == nil || r.prefix.Bits() > slow.prefix.Bits()) {
				slow = r
			}
		}
		if fast := specialRangeOf(a); (fast == nil) != (slow == nil) || fast != nil && fast.prefix != slow.prefix {
			t.Fatalf("%s: decided by %+v, but the most specific entry containing it is %+v", a, fast, slow)
		}
		err := zero.CheckAddr(a, 443)
		if err == nil {
			u := a.Unmap()
			if !u.IsGlobalUnicast() || u.IsPrivate() || u.IsLoopback() || u.IsLinkLocalUnicast() {
				t.Fatalf("%s allowed, but netip says it is not a public unicast address", a)
			}
		}
		if a.Is4() {
			if (zero.CheckAddr(netip.AddrFrom16(a.As16()), 443) == nil) != (err == nil) {
				t.Fatalf("%s and its IPv4-mapped form get different verdicts", a)
			}
		}
		if err != nil {
			r := specialRangeOf(a)
			only := &UpstreamAddressRule{AllowCIDRs: []netip.Prefix{netip.PrefixFrom(a, a.BitLen())}}
			err2 := only.CheckAddr(a, 443)
			never := strings.Contains(err.Error(), "names no single remote host")
			if (err2 == nil) == never {
				t.Fatalf("%s (%s) with an allow list naming it: %v", a, r.prefix, err2)
			}
		}
	})
}

// The Upstream addresses section of docs/security.md names every range the table refuses or judges
// by an embedded address, so the documentation cannot drift from the table.
func TestREADMEAddressRanges(t *testing.T) {
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Upstream addresses\n")
	if !ok {
		t.Fatal("docs/security.md has no Upstream addresses section")
	}
	sec, _, _ = strings.Cut(sec, "\n#")
	named := map[netip.Prefix]bool{}
	for _, tok := range strings.Split(sec, "`")[1:] {
		if p, err := netip.ParsePrefix(tok); err == nil {
			named[p] = true
		}
	}
	for _, r := range specialRanges {
		if r.kind != rangeGlobal && !named[r.prefix] {
			t.Errorf("the Upstream addresses section of docs/security.md does not name %s (%s)", r.prefix, r.name)
		}
	}
}
