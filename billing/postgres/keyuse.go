package postgres

import (
	"context"
	"fmt"
	"time"
	"tollgate/infra/usage"

	"github.com/jackc/pgx/v5"
)

// foldKeyUses moves keys.last_used_at forward to the batch's key uses, in the fold's
// transaction, so a redelivered batch moves nothing twice (not that moving it twice
// would matter: greatest() makes the update idempotent). Ids that are not UUIDs cannot
// name a key and are skipped rather than failing the batch's usage with them; a key
// deleted since is simply not found.
//
// The rows are locked in primary-key order before they are written, as the rollups are,
// so that two edges' folds touching the same keys never deadlock.
func foldKeyUses(ctx context.Context, tx pgx.Tx, uses []usage.KeyUse) error {
	keyIDs := make([]string, 0, len(uses))
	tenantIDs := make([]string, 0, len(uses))
	ats := make([]time.Time, 0, len(uses))
	for _, u := range uses {
		if validUUID(u.KeyID) && validUUID(u.TenantID) {
			keyIDs = append(keyIDs, u.KeyID)
			tenantIDs = append(tenantIDs, u.TenantID)
			ats = append(ats, time.Unix(u.At, 0).UTC())
		}
	}
	if len(keyIDs) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `WITH u AS (
			SELECT t, k, max(a) AS a FROM unnest($1::uuid[], $2::uuid[], $3::timestamptz[]) AS u(t, k, a) GROUP BY t, k
		), locked AS MATERIALIZED (
			SELECT keys.tenant_id, keys.id FROM keys JOIN u ON keys.tenant_id = u.t AND keys.id = u.k
			ORDER BY keys.tenant_id, keys.id FOR UPDATE OF keys
		)
		UPDATE keys SET last_used_at = greatest(keys.last_used_at, u.a)
		FROM u JOIN locked ON locked.tenant_id = u.t AND locked.id = u.k
		WHERE keys.tenant_id = u.t AND keys.id = u.k
			AND (keys.last_used_at IS NULL OR keys.last_used_at < u.a)`,
		tenantIDs, keyIDs, ats)
	if err != nil {
		return fmt.Errorf("key uses: %w", err)
	}
	return nil
}
