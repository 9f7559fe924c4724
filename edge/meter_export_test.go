package edge

import "time"

// SetWSMeterInterval sets how often e records its open WebSocket tunnels' bytes; call it
// before the first tunnel opens.
func SetWSMeterInterval(e *Edge, d time.Duration) {
	e.ws.SetMeterInterval(d)
}
