// Package repo checks the repository itself: every relative link of the documentation leads somewhere,
// and hack/check-tracked-files.sh (run by make verify) keeps build outputs and large files out of git.
package repo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// root is the repository's top directory (tests run in their package's directory).
const root = "../.."

// docs returns README.md and every page under docs/.
func docs(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages under docs/: %v", err)
	}
	return append([]string{filepath.Join(root, "README.md")}, pages...)
}

var (
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)
	fence   = regexp.MustCompile("(?s)```.*?```")
)

// anchor returns GitHub's id for a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'.
func anchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the ids of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(data), ""), -1) {
		ids[anchor(m[1])] = true
	}
	return ids
}

// brokenLinks lists the relative links of page that lead to no file, or to no heading of a Markdown file.
func brokenLinks(t *testing.T, page string) []string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var broken []string
	for _, m := range link.FindAllStringSubmatch(fence.ReplaceAllString(string(data), ""), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		path := page
		if file != "" {
			path = filepath.Join(filepath.Dir(page), file)
		}
		if _, err := os.Stat(path); err != nil {
			broken = append(broken, target+": no such file")
			continue
		}
		if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
			broken = append(broken, target+": no such heading")
		}
	}
	return broken
}

// TestDocLinks: every relative link in README.md and docs/ points at a file that exists, and an anchor
// into a Markdown file at one of its headings.
func TestDocLinks(t *testing.T) {
	for _, page := range docs(t) {
		if broken := brokenLinks(t, page); len(broken) > 0 {
			t.Errorf("%s: broken links:\n  %s", page, strings.Join(broken, "\n  "))
		}
	}
}

// TestEveryDocPageIsLinkedFromREADME: the README's map of the docs names every page.
func TestEveryDocPageIsLinkedFromREADME(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for _, page := range docs(t)[1:] {
		if !strings.Contains(string(readme), "](docs/"+filepath.Base(page)+")") {
			missing = append(missing, filepath.Base(page))
		}
	}
	if diff := cmp.Diff([]string(nil), missing); diff != "" {
		t.Errorf("docs pages the README does not link (-want +got):\n%s", diff)
	}
}

func TestAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"Running locally: the process node":                       "running-locally-the-process-node",
		"API reference (`ml.example.com/v1`, kind `TrainingJob`)": "api-reference-mlexamplecomv1-kind-trainingjob",
		"Operator metrics, dashboard and alerts":                  "operator-metrics-dashboard-and-alerts",
		"Experiment tracking: an MLflow run per TrainingJob":      "experiment-tracking-an-mlflow-run-per-trainingjob",
		"make unit, make lint":                                    "make-unit-make-lint",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestREADMEIsAPage: README.md stays a page a new user reads in a few screens: what it is, the demo and
// test commands, a TrainingJob, install, and the map of docs/; everything else lives in docs/.
func TestREADMEIsAPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const maxLines = 150
	if n := strings.Count(string(data), "\n"); n > maxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the details into a page of docs/", n, maxLines)
	}
	var got []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(data), ""), -1) {
		if strings.HasPrefix(m[0], "## ") {
			got = append(got, m[1])
		}
	}
	want := []string{"Try it: one command, no cluster", "Run the tests", "A TrainingJob", "When things go wrong", "Install", "Documentation"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("README.md's sections (-want +got):\n%s", diff)
	}
}
