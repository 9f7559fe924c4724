package grpcstatus

import (
	"strconv"
	"testing"
)

func TestContentType(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"application/grpc", "application/grpc"},
		{"application/grpc+proto", "application/grpc"},
		{"application/grpc+json", "application/grpc"},
		{"Application/GRPC; charset=utf-8", "application/grpc"},
		{"application/grpc-web", "application/grpc-web"},
		{"application/grpc-web+proto", "application/grpc-web+proto"},
		{"application/grpc-web+json", "application/grpc-web"},
		{"application/grpc-web-text", "application/grpc-web-text"},
		{"application/grpc-web-text+proto", "application/grpc-web-text+proto"},
		{"application/grpc-web-text+proto;x=1", "application/grpc-web-text+proto"},
		{"", ""},
		{"application/json", ""},
		{"application/grpcx", ""},
		{"application/grpc-webx", ""},
		{"application/grpc-web-textual", ""},
		{"application/grp", ""},
		{"text/grpc", ""},
		{"application/x-www-form-urlencoded", ""},
	} {
		if got := string(ContentType([]byte(c.in))); got != c.want {
			t.Errorf("ContentType(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestFromHTTP(t *testing.T) {
	for status, want := range map[int]int{400: 13, 401: 16, 403: 7, 404: 12, 405: 12, 413: 8, 429: 8,
		500: 14, 502: 14, 503: 14, 504: 14, 421: 2, 431: 2, 409: 2} {
		if got := FromHTTP(status); got != want {
			t.Errorf("FromHTTP(%d) = %d, want %d", status, got, want)
		}
	}
	for i, s := range text {
		if string(s) != strconv.Itoa(i) {
			t.Errorf("text[%d] = %q", i, s)
		}
	}
}
