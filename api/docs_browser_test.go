package api_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"tollgate/infra/aptget"
)

const chromium = "/usr/bin/chromium"

var chromiumOnce = sync.OnceValue(func() string {
	if _, err := os.Stat(chromium); err == nil {
		return ""
	}
	// As web's browser tests do: a fresh machine of the project's kind gets Debian's
	// chromium, as root or in CI.
	if err := aptget.Install("api", "chromium"); err != nil {
		return chromium + " is missing: " + err.Error()
	}
	if _, err := os.Stat(chromium); err != nil {
		return "apt-get installed no " + chromium
	}
	return ""
})

// TestDocsPageInBrowser: real headless Chromium opens the reference page, which renders an
// operation from the document, and the console reports no policy violation, script error
// or failed load.
func TestDocsPageInBrowser(t *testing.T) {
	t.Parallel()
	if why := chromiumOnce(); why != "" {
		t.Fatal(why) // a browser test that cannot run fails: skipping would hide it
	}
	e := newEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go e.srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.srv.Shutdown(ctx)
	})

	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("no-first-run", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// The first action starts the browser, which lives as long as that action's context.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	var mu sync.Mutex
	var bad []string
	cctx, stopConsole := context.WithCancel(bctx)
	messages := chromedp.Console(cctx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			// Errors (a refused inline style or eval, a failed load, an exception) fail
			// the test; the renderer's own warnings about its dependencies do not.
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Source == "security" ||
				strings.Contains(m.Text, "Content Security Policy") {
				mu.Lock()
				bad = append(bad, m.String()+" "+m.URL)
				mu.Unlock()
			}
		}
	}()

	ctx, cancel := context.WithTimeout(bctx, 25*time.Second)
	defer cancel()
	base := "http://" + ln.Addr().String()
	// An operation's page: its summary is the heading, and its request body's fields
	// (from the document's schemas) are listed.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/v1/docs#/operations/postTenants"),
		chromedp.WaitVisible(chromedp.CSS(`h1`)),
	); err != nil {
		t.Fatalf("open /v1/docs: %v", err)
	}
	want := []string{"Create a tenant", "POST", "/v1/tenants", "List tenants", "DNS label"}
	var text string
	for {
		text, _ = chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
		missing := ""
		for _, w := range want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the page never showed %q; it shows:\n%s", missing, text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Styled, not raw markup: both stylesheets applied (Font Awesome's sizes the icons,
	// which unstyled fill the page).
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify({
		sheets: document.styleSheets.length,
		icons: Array.from(document.querySelectorAll("svg.svg-inline--fa")).map(s => s.getBoundingClientRect().width),
		h1: getComputedStyle(document.querySelector("h1")).fontSize,
	})`))
	var style struct {
		Sheets int
		Icons  []float64
		H1     string
	}
	if err != nil || json.Unmarshal([]byte(got), &style) != nil {
		t.Fatalf("read the page's style: %v %s", err, got)
	}
	if style.Sheets != 2 || len(style.Icons) == 0 || style.H1 == "" || style.H1 == "32px" { // 32px: the browser's own h1
		t.Errorf("the page is not styled: %s", got)
	}
	for _, w := range style.Icons {
		if w > 40 {
			t.Errorf("an icon %.0fpx wide: Font Awesome's stylesheet did not apply", w)
			break
		}
	}
	// Let late work (the schema panes, lazy chunks) report before reading the console.
	time.Sleep(time.Second)
	stopConsole()
	<-consoleDone
	mu.Lock()
	defer mu.Unlock()
	for _, m := range bad {
		t.Errorf("console: %s", m)
	}
}
