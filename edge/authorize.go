package edge

// accessStep lets a request through only when the tenant's access rules allow the caller
// the method on the normalized path (before strip_prefix: what the rules see is what the
// upstream's router sees, plus the prefix).
func (e *Edge) accessStep(rt *route, next handler) handler {
	s := rt.snapshot
	denied := e.auth.rejected[rejAccess]
	return func(x *exchange) {
		c := x.consumer
		if c == nil || s.accessRules == nil || !s.accessRules.Allow(c.subjects, x.ctx.Request.Header.Method(), x.path) {
			denied.Inc()
			x.fail(replyAccessDenied)
			return
		}
		next(x)
	}
}
