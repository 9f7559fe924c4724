package dnsproof

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

	"tollgate/tenants"
)

// store is what the loop needs of the domain store (tenants/postgres implements it).
type store interface {
	DueDomains(ctx context.Context, now time.Time, lease time.Duration, n int) ([]*tenants.Domain, error)
	RecordProof(ctx context.Context, tenantID, id, token string, p tenants.Proof, now time.Time, s tenants.DomainSchedule, manual bool) (*tenants.Domain, error)
}

// Loop runs the automatic checks of custom domains: soon after a claim, with backoff
// while it stays pending, and periodically once verified (Schedule).
//
// Every api replica may run one. They need no lock between them: each due domain is
// leased to one replica by the store (DueDomains), and a check is recorded against the
// claim's token under a row lock (RecordProof), so a check that another replica's or a
// tenant's change overtook records nothing or applies in order.
type Loop struct {
	Store    store
	Checker  tenants.ProofChecker
	Schedule tenants.DomainSchedule
	// Logger gets a line per status change and per failing round. Default: discard.
	Logger *slog.Logger
	// Every is how often due domains are looked for. Default: 2s, or PendingMin/2 when
	// that is shorter.
	Every time.Duration
	// Batch is how many due domains one round takes; Parallel how many are checked at
	// once; Lease how long they are kept from other replicas. Defaults: 100, 8, 2m.
	Batch    int
	Parallel int
	Lease    time.Duration
}

// Run checks due domains until ctx ends; it returns nil then.
func (l *Loop) Run(ctx context.Context) error {
	s := l.Schedule.WithDefaults()
	log := l.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("component", "domain-checks")
	every := l.Every
	if every <= 0 {
		every = max(min(2*time.Second, s.PendingMin/2), 10*time.Millisecond)
	}
	batch, parallel, lease := l.Batch, l.Parallel, l.Lease
	if batch <= 0 {
		batch = 100
	}
	if parallel <= 0 {
		parallel = 8
	}
	if lease <= 0 {
		lease = 2 * time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			n, err := l.round(ctx, s, log, batch, parallel, lease)
			if err != nil && ctx.Err() == nil {
				log.Warn("custom domain checks: cannot take due domains", "err", err)
			}
			if err != nil || n < batch {
				break // a full batch means more may be due: go on at once
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// round checks one batch of due domains and returns how many it took.
func (l *Loop) round(ctx context.Context, s tenants.DomainSchedule, log *slog.Logger, batch, parallel int, lease time.Duration) (int, error) {
	due, err := l.Store.DueDomains(ctx, time.Now(), lease, batch)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, d := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			l.check(ctx, d, s, log)
		}()
	}
	wg.Wait()
	return len(due), nil
}

func (l *Loop) check(ctx context.Context, d *tenants.Domain, s tenants.DomainSchedule, log *slog.Logger) {
	token := d.Verification.Value
	p := l.Checker.CheckProof(ctx, d.Hostname, token)
	if ctx.Err() != nil {
		return // shutting down: the lease runs out and another replica checks it
	}
	saved, err := l.Store.RecordProof(ctx, d.TenantID, d.ID, token, p, time.Now(), s, false)
	switch {
	case err != nil && saved == nil:
		log.Warn("custom domain check not recorded", "tenant_id", d.TenantID, "domain_id", d.ID, "hostname", d.Hostname, "err", err)
	case saved.Status != d.Status && saved.Verified():
		log.Info("custom domain verified", "tenant_id", d.TenantID, "domain_id", d.ID, "hostname", d.Hostname)
	case saved.Status != d.Status:
		log.Warn("custom domain no longer verified", "tenant_id", d.TenantID, "domain_id", d.ID, "hostname", d.Hostname, "reason", saved.LastError)
	}
}
