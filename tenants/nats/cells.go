package nats

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"tollgate/tenants"
)

// DefaultCell is the cell of a change that names none.
const DefaultCell = "default"

// CellPublisher routes each change to the Publisher of its cell's bucket (tenants.Change.
// Cell; "" is DefaultCell). It is what the outbox relay publishes through when there are
// cells; one Publisher per cell, several of which may share a NATS connection.
//
// Ordering: a batch is cut into segments, each published one cell after the other in the
// order the cells first appear in it, so every bucket receives its changes in Rev order.
// Across buckets only one order matters: a tenant moved from cell a to b must be put in
// b before it is deleted from a, or it would for a moment be served by neither. A new
// segment therefore starts wherever a tenant's change goes to another cell than its
// previous change in the segment did, and a segment is out (acknowledged) before the next
// one is sent. A batch that fails is retried whole by the caller, as with Publisher.
type CellPublisher struct {
	cells map[string]*Publisher
}

// NewCellPublisher returns a publisher to the cells' Publishers, by cell name.
func NewCellPublisher(cells map[string]*Publisher) *CellPublisher {
	return &CellPublisher{cells: maps.Clone(cells)}
}

// Publish publishes changes to their cells' buckets; nil only when every bucket
// acknowledged its share. A change of a cell this publisher has no Publisher for fails
// the batch before any of it is sent.
func (p *CellPublisher) Publish(ctx context.Context, changes []tenants.Change) error {
	for _, c := range changes {
		if p.cells[cellOf(c)] == nil {
			return fmt.Errorf("publish rev %d (%s): cell %q is not declared (declared: %s)",
				c.Rev, c.Key, cellOf(c), strings.Join(slices.Sorted(maps.Keys(p.cells)), ", "))
		}
	}
	for len(changes) > 0 {
		n := segment(changes)
		if err := p.publishSegment(ctx, changes[:n]); err != nil {
			return err
		}
		changes = changes[n:]
	}
	return nil
}

// segment is the length of the longest prefix of changes in which no tenant's changes go
// to two cells.
func segment(changes []tenants.Change) int {
	cellOfTenant := map[string]string{}
	for i, c := range changes {
		tenant, _, _ := strings.Cut(c.Key, ".")
		cell := cellOf(c)
		if prev, ok := cellOfTenant[tenant]; ok && prev != cell {
			return i
		}
		cellOfTenant[tenant] = cell
	}
	return len(changes)
}

// publishSegment publishes each cell's share of changes, cell after cell.
func (p *CellPublisher) publishSegment(ctx context.Context, changes []tenants.Change) error {
	var order []string
	byCell := map[string][]tenants.Change{}
	for _, c := range changes {
		cell := cellOf(c)
		if _, ok := byCell[cell]; !ok {
			order = append(order, cell)
		}
		byCell[cell] = append(byCell[cell], c)
	}
	for _, cell := range order {
		if err := p.cells[cell].Publish(ctx, byCell[cell]); err != nil {
			return fmt.Errorf("cell %s: %w", cell, err)
		}
	}
	return nil
}

func cellOf(c tenants.Change) string {
	if c.Cell == "" {
		return DefaultCell
	}
	return c.Cell
}

// ResyncCells is Resync for cells: it makes each cell's bucket (kvs, by cell name) hold
// exactly the entries of changes that go to that cell, and no other key. A key left in a
// bucket its tenant no longer uses (a move whose deletes were lost) is deleted like any
// other absent key: not when its Rev is newer than every Rev of changes. A change of a
// cell kvs does not name fails the resync before any bucket is touched.
func ResyncCells(ctx context.Context, kvs map[string]jetstream.KeyValue, changes []tenants.Change) error {
	byCell := make(map[string][]tenants.Change, len(kvs))
	var maxRev int64
	for _, c := range changes {
		cell := cellOf(c)
		if kvs[cell] == nil {
			return fmt.Errorf("resync: rev %d (%s) is of cell %q, which is not declared", c.Rev, c.Key, cell)
		}
		byCell[cell] = append(byCell[cell], c)
		maxRev = max(maxRev, c.Rev)
	}
	for _, cell := range slices.Sorted(maps.Keys(kvs)) {
		if err := resync(ctx, kvs[cell], byCell[cell], maxRev); err != nil {
			return fmt.Errorf("cell %s: %w", cell, err)
		}
	}
	return nil
}
