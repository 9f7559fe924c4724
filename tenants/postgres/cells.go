package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"tollgate/tenants"
)

// DefaultCell is the cell of every tenant while no other is declared: the migration's
// column default, and the cell whose KV bucket keeps the name it had before cells.
const DefaultCell = "default"

// WithCells declares the cells new tenants may be placed on (TOLLGATE_CELLS), in the
// operator's order. Default: the default cell alone, which is where every tenant then is.
func WithCells(names []string) Option {
	return func(db *DB) {
		if len(names) > 0 {
			db.cells = slices.Clone(names)
		}
	}
}

// Cells are the declared cells.
func (db *DB) Cells() []string { return slices.Clone(db.cells) }

// placement is the cell a new tenant goes to: pinned when the operator named one (it must
// be declared), else the declared cell with the fewest tenants, the first declared on a
// tie. It counts committed tenants, so creates racing each other may land on one cell;
// the next creates even it out.
func (db *DB) placement(ctx context.Context, tx pgx.Tx, pinned string) (string, error) {
	if pinned != "" {
		if !slices.Contains(db.cells, pinned) {
			return "", tenants.Invalid("cell", "%q is not a declared cell (%v)", pinned, db.cells)
		}
		return pinned, nil
	}
	if len(db.cells) == 1 {
		return db.cells[0], nil
	}
	var cell string
	err := tx.QueryRow(ctx, `SELECT d.cell FROM unnest($1::text[]) WITH ORDINALITY AS d(cell, i)
		ORDER BY (SELECT count(*) FROM tenants t WHERE t.cell = d.cell), d.i LIMIT 1`, db.cells).Scan(&cell)
	return cell, err
}

// MoveTenant places the tenant in cell and moves its config entries there, in one
// transaction: the outbox gets a put of every entry of the tenant for cell's bucket, then
// a delete of each of them from the bucket of the cell it leaves. The relay publishes the
// puts before the deletes (tenants/nats.CellPublisher keeps that order across buckets), so
// the new cell's edges hold the tenant before the old cell's drop it; while both do, the
// load balancer may send its traffic to either. Moving a tenant to the cell it is in
// changes nothing. ENotFound, EValidation (cell not declared).
func (db *DB) MoveTenant(ctx context.Context, tenantID, cell string) (*tenants.Tenant, error) {
	if !parseID(tenantID) {
		return nil, notFound("tenant")
	}
	if !slices.Contains(db.cells, cell) {
		return nil, tenants.Invalid("cell", "%q is not a declared cell (%v)", cell, db.cells)
	}
	var moved *tenants.Tenant
	err := db.write(ctx, func(tx pgx.Tx) error {
		// The row lock (not FOR UPDATE: objects' foreign keys take theirs shared, and
		// their writers may hold the rev lock below) orders the move after any other
		// change of the tenant's row.
		var from string
		if err := tx.QueryRow(ctx, `SELECT cell FROM tenants WHERE id = $1 FOR NO KEY UPDATE`, tenantID).Scan(&from); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFound("tenant")
			}
			return err
		}
		if from == cell {
			t, err := scanTenant(tx.QueryRow(ctx, `SELECT `+tenantColumns+` FROM tenants WHERE id = $1`, tenantID))
			moved = t
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE tenants SET cell = $2, version = version + 1, updated_at = now() WHERE id = $1`, tenantID, cell); err != nil {
			return err
		}
		// Held from here to commit, the rev lock makes the entries read below complete:
		// every write of the tenant that emitted before has committed, and every one that
		// emits after reads the new cell.
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", revLockID); err != nil {
			return err
		}
		var puts, dels []change
		err := scanEntries(ctx, tx, tenantID, func(tid, key string, e *tenants.Entry) error {
			if e.Tenant != nil {
				moved = e.Tenant
				c := *e.Tenant
				e = &tenants.Entry{Tenant: &c}
			}
			puts = append(puts, change{tenantID: tid, key: key, entry: e, cell: cell})
			dels = append(dels, change{tenantID: tid, key: key, cell: from})
			return nil
		})
		if err != nil {
			return err
		}
		auditUpdate(tx, &cellView{from}, &cellView{cell})
		// The old cell's tenant entry goes first among the deletes: its edges drop the
		// whole tenant on it, and the object deletes that follow are no-ops there.
		return emit(ctx, tx, append(puts, dels...)...)
	})
	if err != nil {
		return nil, constraintError(err, "move tenant", nil)
	}
	return moved, nil
}

// cellView is what a move changes, for its audit entry.
type cellView struct {
	Cell string `json:"cell"`
}

// CheckCells fails when a tenant is in a cell that is not declared: the relay could not
// publish its changes anywhere, and no edge would serve it. Declare the cell again, or
// move its tenants out while it still is.
func (db *DB) CheckCells(ctx context.Context) error {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT cell FROM tenants WHERE NOT cell = ANY($1) ORDER BY cell`, db.cells)
	if err != nil {
		return fmt.Errorf("postgres: check cells: %w", err)
	}
	lost, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: check cells: %w", err)
	}
	if len(lost) > 0 {
		return fmt.Errorf("tenants are in cells that are not declared: %s (declared: %s)", strings.Join(lost, ", "), strings.Join(db.cells, ", "))
	}
	return nil
}

// ListCells lists the declared cells, in declaration order, with their tenant counts.
func (db *DB) ListCells(ctx context.Context) ([]*tenants.CellInfo, error) {
	rows, err := db.pool.Query(ctx, `SELECT d.cell, (SELECT count(*) FROM tenants t WHERE t.cell = d.cell)
		FROM unnest($1::text[]) WITH ORDINALITY AS d(cell, i) ORDER BY d.i`, db.cells)
	if err != nil {
		return nil, constraintError(err, "list cells", nil)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*tenants.CellInfo, error) {
		var c tenants.CellInfo
		return &c, r.Scan(&c.Name, &c.Tenants)
	})
	return list, constraintError(err, "list cells", nil)
}

var _ tenants.CellService = (*DB)(nil)
