package config

import (
	"fmt"
	"regexp"
	"strings"
)

// DefaultCell is the cell every tenant is in when TOLLGATE_CELLS is unset, and the one
// whose bucket keeps the name the config bucket had before there were cells.
const DefaultCell = "default"

// Cell is one edge pool: the tenants the control plane placed on it, the KV bucket of
// their config entries, and the NATS that bucket lives on.
type Cell struct {
	Name string
	// NATSURL is the cell's NATS (its bucket, and its edges' usage and request log
	// streams); "" means the main one, TOLLGATE_NATS_URL.
	NATSURL string
}

// validCellName keeps a cell's name usable in a KV bucket name, a Kubernetes label and a
// URL path segment alike.
var validCellName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ValidCellName reports whether name may name a cell.
func ValidCellName(name string) bool { return validCellName.MatchString(name) }

// parseCells reads TOLLGATE_CELLS: cells separated by ";", each a name, optionally
// followed by "=" and its NATS URL (which may itself list servers separated by commas).
// The default cell must be among them: tenants made before cells were declared are in it.
func parseCells(v string) ([]Cell, error) {
	var cells []Cell
	seen := map[string]bool{}
	for part := range strings.SplitSeq(v, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, url, _ := strings.Cut(part, "=")
		name, url = strings.TrimSpace(name), strings.TrimSpace(url)
		if !ValidCellName(name) {
			return nil, fmt.Errorf("TOLLGATE_CELLS: %q is not a cell name (a–z, 0–9 and '-', at most 32, starting with a letter or digit)", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("TOLLGATE_CELLS: cell %q is declared twice", name)
		}
		seen[name] = true
		if strings.Contains(part, "=") && url == "" {
			return nil, fmt.Errorf("TOLLGATE_CELLS: cell %q has an empty NATS URL (leave out the '=' for the main NATS)", name)
		}
		cells = append(cells, Cell{Name: name, NATSURL: url})
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("TOLLGATE_CELLS: %q declares no cell", v)
	}
	if !seen[DefaultCell] {
		return nil, fmt.Errorf("TOLLGATE_CELLS: the cell %q must be declared: tenants made before cells (and those its column default places) are in it", DefaultCell)
	}
	return cells, nil
}

// cells reads TOLLGATE_CELLS and TOLLGATE_EDGE_CELL.
func (c *Config) cells(getenv func(string) string) error {
	c.Cells = []Cell{{Name: DefaultCell}}
	if v := getenv("TOLLGATE_CELLS"); v != "" {
		cells, err := parseCells(v)
		if err != nil {
			return err
		}
		c.Cells = cells
	}
	c.EdgeCell = DefaultCell
	if v := getenv("TOLLGATE_EDGE_CELL"); v != "" {
		if !ValidCellName(v) {
			return fmt.Errorf("TOLLGATE_EDGE_CELL: %q is not a cell name (a–z, 0–9 and '-', at most 32)", v)
		}
		c.EdgeCell = v
		// An edge may run without the list (its cell's bucket name follows from the cell's
		// name); with the list, its cell must be on it, or its NATS would be a guess.
		if getenv("TOLLGATE_CELLS") != "" && c.Cell(v) == nil {
			return fmt.Errorf("TOLLGATE_EDGE_CELL: %q is not among TOLLGATE_CELLS", v)
		}
	}
	return nil
}

// Cell is the declared cell named name, nil when there is none.
func (c *Config) Cell(name string) *Cell {
	for i := range c.Cells {
		if c.Cells[i].Name == name {
			return &c.Cells[i]
		}
	}
	return nil
}

// CellNames are the declared cells' names, in declaration order.
func (c *Config) CellNames() []string {
	names := make([]string, len(c.Cells))
	for i, cell := range c.Cells {
		names[i] = cell.Name
	}
	return names
}

// CellBucket is the KV bucket of cell's config entries: the default cell's keeps the
// name the one bucket had before cells, another's adds the cell's name.
func (c *Config) CellBucket(cell string) string {
	if cell == DefaultCell || cell == "" {
		return c.NATSPrefix + "_config"
	}
	return c.NATSPrefix + "_config_" + cell
}

// CellNATSURL is the NATS of cell: its own when TOLLGATE_CELLS gives one, else the main
// one (TOLLGATE_NATS_URL, or DefaultNATSURL when that is unset).
func (c *Config) CellNATSURL(cell string) string {
	if d := c.Cell(cell); d != nil && d.NATSURL != "" {
		return d.NATSURL
	}
	if c.NATSURL != "" {
		return c.NATSURL
	}
	return DefaultNATSURL
}

// EdgeNATSURL is the NATS an edge connects to: its cell's.
func (c *Config) EdgeNATSURL() string { return c.CellNATSURL(c.EdgeCell) }
