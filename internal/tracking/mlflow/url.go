package mlflow

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// URIError says why the address of a tracking server is refused; no request is made to it. It never
// quotes the address, which may carry a password.
type URIError struct{ Problem string }

func (e *URIError) Error() string {
	return "the MLflow tracking URI is refused: " + e.Problem + " (want http:// or https://HOST[:PORT][/PATH])"
}

// ParseBaseURL parses the address of a tracking server: http or https with a host, and no user
// information, query or fragment (a query or fragment would swallow the API paths joined to the address,
// and credentials belong in a Secret). Its errors are *URIError.
func ParseBaseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, &URIError{Problem: "it is not a URL"} // url.Parse's error quotes the address
	}
	problem := ""
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		problem = fmt.Sprintf("its scheme %q is not http or https", u.Scheme)
	case u.Opaque != "" || u.Hostname() == "":
		problem = "it has no host"
	case u.User != nil:
		problem = "it carries user information"
	case u.RawQuery != "" || u.ForceQuery:
		problem = "it has a query"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		problem = "it has a fragment"
	}
	if problem != "" {
		return nil, &URIError{Problem: problem}
	}
	return u, nil
}

// SameServer reports whether a and b are both accepted by ParseBaseURL and name one server: the same scheme,
// host (compared case-insensitively) and port (a scheme's default port written or left out). Paths do not
// count.
func SameServer(a, b string) bool {
	ua, err := ParseBaseURL(a)
	if err != nil {
		return false
	}
	ub, err := ParseBaseURL(b)
	if err != nil {
		return false
	}
	oa, okA := origin(ua)
	ob, okB := origin(ub)
	return okA && okB && oa == ob
}

// origin returns scheme://host:port of u, with the host in lower case and the port always written as a
// number; false when the port is not one.
func origin(u *url.URL) (string, bool) {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", false
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), strconv.FormatUint(n, 10)), true
}
