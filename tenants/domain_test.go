package tenants_test

import (
	"strings"
	"testing"
	"time"

	"tollgate/tenants"
)

// TestDomainApplyProof: the status transitions and the schedule of a claim's checks.
func TestDomainApplyProof(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := tenants.DomainSchedule{PendingMin: 10 * time.Second, PendingMax: 10 * time.Minute, GiveUp: 7 * 24 * time.Hour,
		Recheck: time.Hour, Failures: 3}
	found := tenants.Proof{Outcome: tenants.ProofFound}
	missing := tenants.Proof{Outcome: tenants.ProofMissing, Reason: "no TXT record at x"}
	wrong := tenants.Proof{Outcome: tenants.ProofMismatch, Reason: "wrong value"}
	taken := tenants.Proof{Outcome: tenants.ProofTaken, Reason: "verified by another tenant"}
	unresolved := tenants.Proof{Outcome: tenants.ProofUnresolved, Reason: "resolver failed"}
	pending := func(failures int, since time.Time) tenants.Domain {
		return tenants.Domain{Status: tenants.DomainPending, Failures: failures, PendingSince: since}
	}
	verified := func(failures int) tenants.Domain {
		v := t0.Add(-24 * time.Hour)
		return tenants.Domain{Status: tenants.DomainVerified, Failures: failures, VerifiedAt: &v, PendingSince: v}
	}
	demoted := pending(1, t0)
	demoted.LastError = "no TXT record at x (3 checks in a row): the domain is pending again and the edges no longer serve it"
	cases := []struct {
		name     string
		d        tenants.Domain
		p        tenants.Proof
		manual   bool
		status   string
		changed  bool
		failures int
		next     time.Duration // after t0; -1: no automatic check
		errHas   string
	}{
		{"pending, found", pending(0, t0), found, false, tenants.DomainVerified, true, 0, time.Hour, ""},
		{"pending, missing: first backoff", pending(0, t0), missing, false, tenants.DomainPending, false, 1, 10 * time.Second, "no TXT record"},
		{"pending, wrong value", pending(1, t0), wrong, false, tenants.DomainPending, false, 2, 20 * time.Second, "wrong value"},
		{"pending, backoff doubles", pending(3, t0), missing, false, tenants.DomainPending, false, 4, 80 * time.Second, ""},
		{"pending, backoff capped", pending(12, t0), missing, false, tenants.DomainPending, false, 13, 10 * time.Minute, ""},
		{"pending, resolver failed: backoff too", pending(1, t0), unresolved, false, tenants.DomainPending, false, 2, 20 * time.Second, "resolver failed"},
		{"pending, taken by another tenant", pending(0, t0), taken, false, tenants.DomainPending, false, 1, 10 * time.Second, "another tenant"},
		{"pending for 7 days: checks stop", pending(900, t0.Add(-7*24*time.Hour)), missing, false, tenants.DomainPending, false, 901, -1, "automatic checks stopped"},
		{"manual check restarts the backoff and the window", pending(900, t0.Add(-7*24*time.Hour)), missing, true, tenants.DomainPending, false, 1, 10 * time.Second, "no TXT record"},
		{"manual check finds it", pending(900, t0.Add(-7*24*time.Hour)), found, true, tenants.DomainVerified, true, 0, time.Hour, ""},
		{"no status (an old entry) counts as pending", tenants.Domain{}, found, false, tenants.DomainVerified, true, 0, time.Hour, ""},
		{"verified, found: failures reset", verified(2), found, false, tenants.DomainVerified, false, 0, time.Hour, ""},
		{"verified, first miss", verified(0), missing, false, tenants.DomainVerified, false, 1, time.Hour, "no TXT record"},
		{"verified, second miss (wrong value)", verified(1), wrong, false, tenants.DomainVerified, false, 2, time.Hour, "wrong value"},
		{"verified, third miss: pending again", verified(2), missing, false, tenants.DomainPending, true, 1, 10 * time.Second, "pending again"},
		{"pending again, next miss still says so", demoted, wrong, false, tenants.DomainPending, false, 2, 20 * time.Second, "wrong value (it was verified before: the domain is pending again"},
		{"verified, resolver failures never count", verified(2), unresolved, false, tenants.DomainVerified, false, 2, time.Hour, "resolver failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			changed := d.ApplyProof(c.p, t0, s, c.manual)
			if d.Status != c.status || changed != c.changed || d.Failures != c.failures {
				t.Errorf("status %s changed %v failures %d; want %s %v %d", d.Status, changed, d.Failures, c.status, c.changed, c.failures)
			}
			switch {
			case c.next < 0 && d.NextCheckAt != nil:
				t.Errorf("next check at %v, want none", d.NextCheckAt)
			case c.next >= 0 && (d.NextCheckAt == nil || !d.NextCheckAt.Equal(t0.Add(c.next))):
				t.Errorf("next check at %v, want t0+%v", d.NextCheckAt, c.next)
			}
			if d.CheckedAt == nil || !d.CheckedAt.Equal(t0) {
				t.Errorf("checked_at %v", d.CheckedAt)
			}
			if c.errHas == "" && c.p.Outcome == tenants.ProofFound && d.LastError != "" {
				t.Errorf("last_error %q after the proof was found", d.LastError)
			}
			if !strings.Contains(d.LastError, c.errHas) {
				t.Errorf("last_error %q, want it to say %q", d.LastError, c.errHas)
			}
			switch {
			case d.Verified() && (d.VerifiedAt == nil || c.changed && !d.VerifiedAt.Equal(t0)):
				t.Errorf("verified, verified_at %v", d.VerifiedAt)
			case !d.Verified() && d.VerifiedAt != nil:
				t.Errorf("pending with verified_at %v", d.VerifiedAt)
			}
		})
	}
}

// TestDomainScheduleDefaults: the documented defaults, and a maximum below the minimum
// raised to it.
func TestDomainScheduleDefaults(t *testing.T) {
	s := tenants.DomainSchedule{}.WithDefaults()
	want := tenants.DomainSchedule{PendingMin: 10 * time.Second, PendingMax: 10 * time.Minute, GiveUp: 7 * 24 * time.Hour, Recheck: time.Hour, Failures: 3}
	if s != want {
		t.Errorf("defaults %+v, want %+v", s, want)
	}
	if s := (tenants.DomainSchedule{PendingMin: time.Hour, PendingMax: time.Minute}).WithDefaults(); s.PendingMax != time.Hour {
		t.Errorf("max below min: %v", s.PendingMax)
	}
}
