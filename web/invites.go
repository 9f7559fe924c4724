package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"tollgate/tenants"
)

// Invitations, from the invitee's side. The mailed link opens a page that asks the person
// to sign in; only a user whose verified email is the invited address sees which tenant it
// is and may accept or decline. Every other visitor learns nothing about the invitation
// beyond what the link's holder already knew.

// invitePath is the page the mailed link opens (tenants.InviteAcceptPath).
const invitePath = Prefix + "/invites/accept"

// resendPath sends the signed-in user's verification mail again.
const resendPath = Prefix + "/verify/resend"

// inviteView is what the invitation page shows. State picks the message: signin, gone,
// expired, verify, other, offer or declined.
type inviteView struct {
	State  string
	Token  string
	Next   string // this page, for the sign-in and sign-up links to come back to
	Offer  *tenants.InviteOffer
	Resend string // where an unverified user has the verification mail sent again
}

// mailInvite sends the invitation's link. A mail that cannot be handed to the mail server
// withdraws the invite, so no invite is left pending whose link nobody has.
//
// Unlike the identity mail, it is sent before the answer: the answer is the same for every
// address anyway, and the inviter learns when the mail server refuses.
func (c *Console) mailInvite(ctx *fiber.Ctx, inv *tenants.Invite, t *tenants.Tenant, token string) error {
	if err := c.cfg.Mailer.Send(c.ctx(ctx), tenants.InvitationMail(inv, t.Slug, t.Name, c.cfg.PublicURL, token)); err != nil {
		c.log.Error("console: mail an invitation", "err", err)
		bg, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		bg = tenants.WithAudit(bg, tenants.Audit{TenantID: inv.TenantID, Actor: user(ctx).Email,
			Action: tenants.AuditAction("invites", tenants.AuditDelete), Object: inv.Email}) // the create is in the log
		if derr := c.cfg.People.DeleteInvite(bg, inv.TenantID, inv.Email); derr != nil && tenants.ErrorCode(derr) != tenants.ENotFound {
			c.log.Error("console: withdraw an unsent invite", "err", derr)
		}
		return err
	}
	return nil
}

// invitePage is GET /console/invites/accept?token=…
func (c *Console) invitePage(ctx *fiber.Ctx) error {
	token := ctx.Query("token")
	v := inviteView{Token: token, Next: invitePath + "?token=" + url.QueryEscape(token)}
	u := user(ctx)
	if u == nil {
		v.State = "signin"
		return c.inviteRender(ctx, http.StatusOK, v)
	}
	o, err := c.cfg.People.FindInvite(c.ctx(ctx), token)
	switch {
	case tenants.ErrorCode(err) == tenants.ENotFound:
		v.State = "gone"
		return c.inviteRender(ctx, http.StatusNotFound, v)
	case err != nil:
		return c.internal(ctx, err)
	case o.Expired(c.cfg.Now()):
		v.State, v.Offer = "expired", &tenants.InviteOffer{Invite: tenants.Invite{ExpiresAt: o.ExpiresAt}}
		return c.inviteRender(ctx, http.StatusNotFound, v)
	case !u.EmailVerified:
		// Checked before the address, so an unverified account learns nothing about the
		// invitation, not even whether it names its address.
		v.State = "verify"
		return c.inviteRender(ctx, http.StatusForbidden, v)
	case u.Email != o.Email:
		v.State = "other"
		return c.inviteRender(ctx, http.StatusForbidden, v)
	}
	v.State, v.Offer = "offer", o
	return c.inviteRender(ctx, http.StatusOK, v)
}

// inviteAccept is POST /console/invites/accept (token, _csrf).
func (c *Console) inviteAccept(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again and open the invitation link once more.")
	}
	token := ctx.FormValue("token")
	// The store knows the invitation's tenant, and records there the acceptance and the
	// membership it makes.
	m, err := c.cfg.People.AcceptInvite(c.audited(ctx, u, "", tenants.AuditAction("invites", tenants.AuditAccept), ""), token, u.ID)
	if err != nil {
		return c.inviteRefused(ctx, token, err)
	}
	return ctx.Redirect(Prefix+"/t/"+m.TenantSlug+"/routes?done=invite-accepted", http.StatusSeeOther)
}

// inviteDecline is POST /console/invites/decline (token, _csrf).
func (c *Console) inviteDecline(ctx *fiber.Ctx) error {
	u := user(ctx)
	if u == nil {
		return c.errorPage(ctx, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again and open the invitation link once more.")
	}
	token := ctx.FormValue("token")
	o, err := c.cfg.People.DeclineInvite(c.audited(ctx, u, "", tenants.AuditAction("invites", tenants.AuditDecline), ""), token, u.ID)
	if err != nil {
		return c.inviteRefused(ctx, token, err)
	}
	backTo(ctx, invitePath+"?token="+url.QueryEscape(token))
	return c.inviteRender(ctx, http.StatusOK, inviteView{State: "declined", Offer: o})
}

// inviteRefused shows why the store refused to accept or decline, on the invitation page.
func (c *Console) inviteRefused(ctx *fiber.Ctx, token string, err error) error {
	v := inviteView{Token: token, Next: invitePath + "?token=" + url.QueryEscape(token)}
	backTo(ctx, v.Next)
	switch tenants.ErrorCode(err) {
	case tenants.ENotFound:
		v.State = "gone"
		if o, ferr := c.cfg.People.FindInvite(c.ctx(ctx), token); ferr == nil && o.Expired(c.cfg.Now()) {
			v.State, v.Offer = "expired", &tenants.InviteOffer{Invite: tenants.Invite{ExpiresAt: o.ExpiresAt}}
		}
		return c.inviteRender(ctx, http.StatusNotFound, v)
	case tenants.EForbidden:
		v.State = "other"
		if !user(ctx).EmailVerified {
			v.State = "verify"
		}
		return c.inviteRender(ctx, http.StatusForbidden, v)
	}
	return c.internal(ctx, err)
}

func (c *Console) inviteRender(ctx *fiber.Ctx, status int, v inviteView) error {
	title := map[string]string{
		"signin":   "Sign in to answer this invitation",
		"gone":     "This invitation link is not valid",
		"expired":  "This invitation has expired",
		"verify":   "Verify your address first",
		"other":    "This invitation is for another address",
		"offer":    "You are invited",
		"declined": "Invitation declined",
	}[v.State]
	v.Resend = resendPath
	return c.render(ctx, status, "invite", page{Title: title, Data: v})
}

// localNext is where a sign-in or sign-up goes afterwards: a path of this console (as the
// invitation page passes), never another site, else fallback.
func localNext(next, fallback string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return fallback
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.Contains(u.Path, "..") {
		return fallback
	}
	return next
}
