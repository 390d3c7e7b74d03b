// Package hubtest is a local stand-in for the Hugging Face Hub's file API, for tests: no hub can be
// reached here.
package hubtest

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
)

// Hub is a local stand-in for the Hugging Face Hub's file API (the endpoints huggingface_hub uses:
// /api/{models,datasets}/REPO/revision/REV and /[datasets/]REPO/resolve/REV/FILE), counting the bytes
// it serves. It is not the hub: no hub can be reached here.
type Hub struct {
	// Repos are the repositories: "models/ORG/NAME" or "datasets/ORG/NAME" -> file -> content.
	Repos map[string]map[string]string
	// Token, when set, is the bearer token every request must carry (HF_TOKEN).
	Token string
	// Served counts the bytes of files served; Fail is how many of the next requests answer 503.
	Served atomic.Int64
	Fail   atomic.Int32
}

// ServeHTTP answers the API and file requests, as the hub does (401 without the token, 404 for what it lacks).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.Fail.Add(-1) >= 0 {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	if h.Token != "" && r.Header.Get("Authorization") != "Bearer "+h.Token {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	p := strings.TrimPrefix(r.URL.Path, "/")
	if rest, ok := strings.CutPrefix(p, "api/"); ok {
		kind, rest, _ := strings.Cut(rest, "/")
		repo, _, _ := strings.Cut(rest, "/revision/")
		files, ok := h.Repos[kind+"/"+repo]
		if !ok {
			http.Error(w, "Repository not found", http.StatusNotFound)
			return
		}
		type sibling struct {
			Name string `json:"rfilename"`
			Size int    `json:"size"`
		}
		var s []sibling
		for name, c := range files {
			s = append(s, sibling{name, len(c)})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"siblings": s})
		return
	}
	kind := "models"
	if rest, ok := strings.CutPrefix(p, "datasets/"); ok {
		kind, p = "datasets", rest
	}
	repoRev, file, _ := strings.Cut(p, "/resolve/")
	_, file, _ = strings.Cut(file, "/")
	c, ok := h.Repos[kind+"/"+repoRev][file]
	if !ok {
		http.Error(w, "Entry not found", http.StatusNotFound)
		return
	}
	h.Served.Add(int64(len(c)))
	_, _ = w.Write([]byte(c))
}
