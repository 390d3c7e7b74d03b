package metrics

import (
	"crypto/tls"
	"testing"
)

// TestServingOptions: metrics are HTTPS behind the authentication and authorization filter, over HTTP/1.1,
// with the given certificates; --metrics-insecure-http (InsecureHTTP) is plain HTTP without a filter.
func TestServingOptions(t *testing.T) {
	secure := Serving{BindAddress: ":8443", CertDir: "/certs"}.Options()
	cfg := &tls.Config{NextProtos: []string{"h2"}}
	for _, o := range secure.TLSOpts {
		o(cfg)
	}
	if !secure.SecureServing || secure.FilterProvider == nil || secure.CertDir != "/certs" || secure.BindAddress != ":8443" ||
		len(cfg.NextProtos) != 1 || cfg.NextProtos[0] != "http/1.1" {
		t.Errorf("default: %+v (ALPN %v), want HTTPS with the filter, /certs and HTTP/1.1 only", secure, cfg.NextProtos)
	}
	plain := Serving{BindAddress: ":8080", InsecureHTTP: true, CertDir: "/certs"}.Options()
	if plain.SecureServing || plain.FilterProvider != nil || plain.BindAddress != ":8080" {
		t.Errorf("InsecureHTTP: %+v, want plain HTTP without a filter", plain)
	}
}
