// Command gen-api writes the CEL rules of the TrainingJob CRD that are derived from a Go table, so that
// each list is kept in one place: the rules that refuse the operator's reserved names (from the builders'
// tables builders.ReservedEnvNames, builders.ReservedVolumeNames and builders.ReservedContainerNames), the
// rule that keeps sidecars off the ports of the operator's containers (from sidecarPorts below: the spec's
// default ports and the builders' port constants) and the rules that keep the fields shaping the workers
// immutable while a job runs (from immutableWhileRunning below). In the Go files of the current directory
// it replaces the marker lines between
//
//	// +gen-api:begin=BLOCK (anything: where the rules come from)
//	// +gen-api:end
//
// with BLOCK's rules, indented as the begin line. `go generate ./crd/...` runs it in crd/v1 (make generate
// does, before controller-gen turns the markers into the CRD); make verify fails when its output drifts.
package main

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/trainingjob-operator/trainingjob-operator/builders"
	mlv1 "github.com/trainingjob-operator/trainingjob-operator/crd/v1"
)

// rule is one +kubebuilder:validation:XValidation marker.
type rule struct {
	rule, message, fieldPath string
}

func (r rule) marker() string {
	for _, s := range []string{r.rule, r.message, r.fieldPath} {
		if strings.ContainsAny(s, "\"\\") {
			log.Fatalf("a marker's value may not hold a double quote or a backslash: %s", s)
		}
	}
	m := fmt.Sprintf(`+kubebuilder:validation:XValidation:rule="%s",message="%s"`, r.rule, r.message)
	if r.fieldPath != "" {
		m += fmt.Sprintf(`,fieldPath="%s"`, r.fieldPath)
	}
	return m
}

// blocks are the generated blocks by name: each +gen-api:begin=NAME of the package names one, and each
// is used exactly once.
var blocks = map[string]func() []rule{
	"immutable-while-running": immutableRules,
	"reserved-env-names":      func() []rule { return []rule{envRule()} },
	"workerpod-volumes": func() []rule {
		return []rule{volumeNameRule("v", "workerPod.volumes must not use a volume name of the operator")}
	},
	"workerpod-volumemounts": func() []rule {
		return []rule{volumeNameRule("m", "workerPod.volumeMounts must not mount a volume of the operator")}
	},
	"container-volumemounts": func() []rule {
		return []rule{volumeNameRule("m", "an init or sidecar container must not mount a volume of the operator")}
	},
	"container-names": func() []rule { return []rule{containerNameRule()} },
	"sidecar-ports":   func() []rule { return []rule{sidecarPortsRule()} },
}

// immutable is a spec field that may not change while the job is Initializing or Running.
type immutable struct {
	// field is the field's JSON name under spec.
	field string
	// optional: the field may be absent, so it is unchanged when both are absent or both are present and
	// equal; otherwise it is compared directly.
	optional bool
	// unless is an exception, a CEL expression that allows the change (said as unlessSaid in the message).
	unless, unlessSaid string
}

// immutableWhileRunning are the spec's fields that shape the workers: changing one under running workers
// would give ranks of one run different programs. The ValidatingAdmissionPolicy in deploy/policy guards
// the fields whose core-type schemas are too large for a CRD rule's cost budget.
var immutableWhileRunning = []immutable{
	{field: "model", optional: true},
	{field: "dataset", optional: true},
	{field: "numWorkers", unless: "(has(self.spec.elastic) && has(oldSelf.spec.elastic))", unlessSaid: "it is elastic"},
	{field: "elastic", optional: true},
	{field: "gpusPerWorker", optional: true},
	{field: "framework", optional: true},
	{field: "image", optional: true},
	{field: "command", optional: true},
	{field: "args", optional: true},
	{field: "hyperparameters", optional: true},
	{field: "networking", optional: true},
}

// immutableRules returns immutableWhileRunning's rules on the TrainingJob: each holds unless the old object was
// not Initializing or Running, and names its field.
func immutableRules() []rule {
	guard := fmt.Sprintf("!has(oldSelf.status) || !has(oldSelf.status.state) || !(oldSelf.status.state in ['%s','%s'])",
		mlv1.StateInitializing, mlv1.StateRunning)
	var out []rule
	for _, f := range immutableWhileRunning {
		now, old := "self.spec."+f.field, "oldSelf.spec."+f.field
		same := fmt.Sprintf("(%s == %s)", now, old)
		if f.optional {
			same = fmt.Sprintf("(has(%s) == has(%s) && (!has(%s) || %s == %s))", now, old, now, now, old)
		}
		r := guard + " || " + same
		message := "spec." + f.field + " is immutable while the job is Initializing or Running"
		if f.unless != "" {
			r += " || " + f.unless
			message += ", unless " + f.unlessSaid
		}
		out = append(out, rule{rule: r, message: message + "; suspend it first", fieldPath: ".spec." + f.field})
	}
	return out
}

// envMessageNames are the reserved environment names as spec.env's message lists them, a trailing *
// standing for every name with that prefix. envRule checks them against the builders' tables: every
// reserved name is covered, and no name spec.env may set.
var envMessageNames = []string{
	"MASTER_ADDR", "MASTER_PORT", "RANK", "NODE_RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "PET_*",
	"TF_CONFIG", "JAX_*", "DMLC_*", "PADDLE_*", "TRAININGJOB_*", "MODEL_NAME", "DATASET_NAME", "MODEL_DIR",
	"DATASET_DIR", "TENSORBOARD_LOG_DIR", "METRICS_PORT", "DIST_BACKEND", "POD_IP", "CHECKPOINT_*", "RESUME_FROM",
}

// envRule refuses spec.env entries of the contract's reserved names.
func envRule() rule {
	reserved := builders.ReservedEnvNames
	for _, name := range reserved {
		if !slices.ContainsFunc(envMessageNames, func(p string) bool { return matches(p, name) }) {
			log.Fatalf("the reserved environment name %s is missing from envMessageNames", name)
		}
	}
	for _, p := range envMessageNames {
		if !slices.ContainsFunc(reserved, func(name string) bool { return matches(p, name) }) {
			log.Fatalf("envMessageNames' %s is not a reserved environment name", p)
		}
		for _, name := range builders.DefaultEnvNames {
			if matches(p, name) {
				log.Fatalf("envMessageNames' %s covers %s, which spec.env may set", p, name)
			}
		}
	}
	return rule{
		rule: "self.all(e, !(e.name in [" + quoted(reserved, ",") + "]))",
		message: "env must not set a variable that carries the job's identity, rendezvous or checkpoint location (" +
			strings.Join(envMessageNames, ", ") + "); NCCL_*, PYTHONUNBUFFERED and other tuning variables may be set",
	}
}

func matches(pattern, name string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, prefix)
	}
	return pattern == name
}

// volumeNameRule refuses, in a list of volumes or mounts (each element v), a name of the operator's volumes.
func volumeNameRule(v, message string) rule {
	return rule{
		rule:    fmt.Sprintf("self.all(%s, !(%s.name in [%s]))", v, v, quoted(builders.ReservedVolumeNames, ", ")),
		message: message + " (" + strings.Join(builders.ReservedVolumeNames, ", ") + ")",
	}
}

// containerNameRule refuses an init or sidecar container named as one of the operator's.
func containerNameRule() rule {
	n := builders.ReservedContainerNames
	return rule{
		rule:    "!(self in [" + quoted(n, ", ") + "])",
		message: "the container names " + strings.Join(n[:len(n)-1], ", ") + " and " + n[len(n)-1] + " are the operator's",
	}
}

// sidecarPort is a port of the trainer, the checkpoint agent or the supervisor: a spec field's value (its
// default when absent) or a fixed port.
type sidecarPort struct {
	// field is the port's field under spec, as section.field; "" for a fixed port.
	field string
	// port is the field's default, or the fixed port.
	port int32
	// said follows a fixed port's number in the message ("" for nothing).
	said string
}

// sidecarPorts are the ports a sidecar may not serve, in the order the rule lists them.
var sidecarPorts = []sidecarPort{
	{field: "networking.masterPort", port: mlv1.DefaultMasterPort},
	{field: "monitoring.metricsPort", port: mlv1.DefaultMetricsPort},
	{port: builders.MPISSHPort, said: "for MPI's SSH"},
	{port: builders.AgentPort},
	{port: builders.SupervisorPort},
}

// sidecarPortsRule refuses a sidecar's container port that is one of sidecarPorts.
func sidecarPortsRule() rule {
	var in, said []string
	for _, p := range sidecarPorts {
		port := fmt.Sprint(p.port)
		if p.field == "" {
			in = append(in, port)
			said = append(said, strings.TrimSpace(port+" "+p.said))
			continue
		}
		section, _, _ := strings.Cut(p.field, ".")
		in = append(in, fmt.Sprintf("has(self.%s) && has(self.%s) ? self.%s : %s", section, p.field, p.field, port))
		said = append(said, p.field)
	}
	return rule{
		rule: "!has(self.workerPod) || !has(self.workerPod.sidecars) || self.workerPod.sidecars.all(c, !has(c.ports) || " +
			"c.ports.all(p, !(p.containerPort in [" + strings.Join(in, ", ") + "])))",
		message: "workerPod.sidecars must not serve the trainer's, the checkpoint agent's or the supervisor's ports (" +
			strings.Join(said, ", ") + "): the containers of a pod share its network",
		fieldPath: ".workerPod.sidecars",
	}
}

func quoted(names []string, sep string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, sep)
}

var (
	beginLine = regexp.MustCompile(`^(\s*)// \+gen-api:begin=(\S+)(\s.*)?$`)
	endLine   = regexp.MustCompile(`^\s*// \+gen-api:end\s*$`)
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("gen-api: ")
	files, err := filepath.Glob("*.go")
	if err != nil {
		log.Fatal(err)
	}
	written := map[string]string{}
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") || strings.HasPrefix(file, "zz_generated") {
			continue
		}
		if err := rewrite(file, written); err != nil {
			log.Fatalf("%s: %v", file, err)
		}
	}
	for name := range blocks {
		if written[name] == "" {
			log.Fatalf("no +gen-api:begin=%s in %s", name, strings.Join(files, " "))
		}
	}
}

// rewrite replaces the blocks of file, recording in written the file of each block written.
func rewrite(file string, written map[string]string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	lines := strings.SplitAfter(string(data), "\n")
	var out bytes.Buffer
	for i := 0; i < len(lines); i++ {
		out.WriteString(lines[i])
		m := beginLine.FindStringSubmatch(strings.TrimRight(lines[i], "\n"))
		if m == nil {
			continue
		}
		indent, name := m[1], m[2]
		gen, ok := blocks[name]
		if !ok {
			return fmt.Errorf("line %d: unknown block %s", i+1, name)
		}
		if prev := written[name]; prev != "" {
			return fmt.Errorf("line %d: block %s is also in %s", i+1, name, prev)
		}
		written[name] = file
		end := i + 1
		for end < len(lines) && !endLine.MatchString(lines[end]) {
			if beginLine.MatchString(lines[end]) {
				return fmt.Errorf("line %d: block %s has no +gen-api:end", i+1, name)
			}
			end++
		}
		if end == len(lines) {
			return fmt.Errorf("line %d: block %s has no +gen-api:end", i+1, name)
		}
		for _, r := range gen() {
			out.WriteString(indent + "// " + r.marker() + "\n")
		}
		i = end - 1 // the end line is written next
	}
	if bytes.Equal(out.Bytes(), data) {
		return nil
	}
	return os.WriteFile(file, out.Bytes(), 0o644)
}
