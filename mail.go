package main

import (
	"log/slog"

	"tollgate/infra/config"
	"tollgate/tenants"
	"tollgate/tenants/smtp"
)

// openMailer sends through TOLLGATE_SMTP_URL when it is set. Without it, mail is written to
// the log with its links (what `tollgate dev` wants): a production api should set it, since
// its log then holds every verification and reset link.
func openMailer(cfg *config.Config, log *slog.Logger) (tenants.Mailer, error) {
	if cfg.SMTPURL == "" {
		log.Warn("TOLLGATE_SMTP_URL is not set: mail is logged with its links, not sent")
		return smtp.Log{Logger: log.With("component", "mail")}, nil
	}
	return smtp.New(smtp.Config{URL: cfg.SMTPURL, From: cfg.SMTPFrom})
}
