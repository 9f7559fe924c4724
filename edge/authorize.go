package edge

import (
	"tollgate/tenants"
	"tollgate/tenants/accessrules"
)

// accessPathReplies answers the paths access rules cannot decide on: 400, not 403, since
// no rule was asked and the client can say what it means another way.
var accessPathReplies = map[error]*reply{
	accessrules.ErrPathSegmentEnd: newReply(tenants.EInvalidRequest, string(accessrules.ErrPathSegmentEnd)),
	accessrules.ErrPathCompat:     newReply(tenants.EInvalidRequest, string(accessrules.ErrPathCompat)),
}

var replyAccessPath = newReply(tenants.EInvalidRequest, "this API's access rules refuse the path's spelling")

// accessStep lets a request through only when the tenant's access rules allow the caller
// the method on the normalized path (before strip_prefix: what the rules see is what the
// upstream's router sees, plus the prefix). A path some upstreams read as another (a
// segment ending in "." or whitespace, full-width letters) is refused first: a rule
// written for one reading would miss the other.
func (e *Edge) accessStep(rt *route, next handler) handler {
	s := rt.snapshot
	denied := e.auth.rejected[rejAccess]
	return func(x *exchange) {
		if err := accessrules.CheckPath(x.path); err != nil {
			r := accessPathReplies[err]
			if r == nil {
				r = replyAccessPath
			}
			x.fail(r)
			return
		}
		c := x.consumer
		if c == nil || s.accessRules == nil || !s.accessRules.Allow(c.subjects, x.ctx.Request.Header.Method(), x.path) {
			denied.Inc()
			x.fail(replyAccessDenied)
			return
		}
		next(x)
	}
}
