package deploy

import (
	"encoding/json"
	"fmt"
	"os"
)

// Dashboard is what the tests read of the Grafana dashboard (monitoring/trainingjob-dashboard.json): its
// panels' queries and its template variables.
type Dashboard struct {
	UID    string `json:"uid"`
	Panels []struct {
		// Type is the panel's kind; a "row" only groups the panels below it.
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// ReadDashboard reads a Grafana dashboard file.
func ReadDashboard(path string) (Dashboard, error) {
	var d Dashboard
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &d)
	}
	if err != nil {
		return d, fmt.Errorf("dashboard %s: %w", path, err)
	}
	return d, nil
}

// VariableQueries returns the queries of the dashboard's query variables (Grafana's label_values(...)), by name.
func (d Dashboard) VariableQueries() map[string]string {
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(map[string]any); ok {
			if s, ok := q["query"].(string); ok {
				out[v.Name] = s
			}
		}
	}
	return out
}
