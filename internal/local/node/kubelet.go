package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// The kubelet's container-log endpoint, so that `kubectl logs` (and anything else reading pods/log)
// reaches a process node's containers through the API server as it reaches a kubelet's: the node serves
// GET /containerLogs/NAMESPACE/POD/CONTAINER over HTTPS with a self-signed certificate (the API server
// verifies kubelets' certificates only when given --kubelet-certificate-authority) on the port it
// advertises as its kubelet endpoint. Query parameters: follow (until the container's pod stops on this
// container ends, the pod stops on this node or the client goes), tailLines, limitBytes and previous. A
// container's log file holds all its runs appended; as the kubelet does, the endpoint serves the current
// run's part (previous: the run before it).

// startKubeletAPI listens on the node's address and serves the log endpoint until ctx is done; it returns
// the port.
func (n *Node) startKubeletAPI(ctx context.Context) (int32, error) {
	cert, err := selfSigned()
	if err != nil {
		return 0, err
	}
	l, err := tls.Listen("tcp", net.JoinHostPort(hostIP, "0"),
		&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return 0, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", n.serveLogs)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}

func (n *Node) serveLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container")
	path, err := LogPath(n.opts.DataRoot, ns, pod, container)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	q := r.URL.Query()
	run := n.podRun(ns, pod)
	if run != nil {
		if from, to, _, ok := run.logRange(container, q.Get("previous") == "true"); ok {
			data = data[min(from, int64(len(data))):]
			if to >= from && to-from < int64(len(data)) {
				data = data[:to-from]
			}
		}
	}
	data = tail(data, q.Get("tailLines"))
	if limit, err := strconv.Atoi(q.Get("limitBytes")); err == nil && limit >= 0 && limit < len(data) {
		data = data[:limit]
	}
	w.Header().Set("Content-Type", "text/plain")
	if _, err := w.Write(data); err != nil || q.Get("follow") != "true" || q.Get("previous") == "true" {
		return
	}
	n.follow(r.Context(), w, path, ns, pod, container)
}

// tail returns the last n lines of data ("" or a bad number: all).
func tail(data []byte, lines string) []byte {
	k, err := strconv.Atoi(lines)
	if err != nil || k < 0 {
		return data
	}
	s := strings.TrimSuffix(string(data), "\n")
	parts := strings.Split(s, "\n")
	if k >= len(parts) || s == "" {
		return data
	}
	return []byte(strings.Join(parts[len(parts)-k:], "\n") + "\n")
}

// follow streams what is appended to the log until the container's run ends (as the kubelet's follow
// does), the pod no longer runs on this node, or the client goes.
func (n *Node) follow(ctx context.Context, w http.ResponseWriter, path, ns, pod, container string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }() // read only
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		return
	}
	flusher, _ := w.(http.Flusher)
	for {
		if _, err := io.Copy(w, f); err != nil && !errors.Is(err, io.EOF) {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		run := n.podRun(ns, pod)
		if run == nil {
			_, _ = io.Copy(w, f)
			return
		}
		if _, _, running, ok := run.logRange(container, false); ok && !running {
			_, _ = io.Copy(w, f)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podRun returns the run of the pod of that name on this node (running or being stopped), nil when none.
func (n *Node) podRun(ns, name string) *podRun {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.runs {
		if r.key.Namespace == ns && r.key.Name == name {
			return r
		}
	}
	return nil
}

// selfSigned returns a certificate for the node's address, valid for a year.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "process-node"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(hostIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
