// helmrender: renders a Helm chart's templates the way `helm template` does,
// for the tests (there is no helm binary here): Go's text/template with the
// sprig function library Helm uses (without env/expandenv, as Helm) and
// Helm's own functions as helm.sh/helm/v3/pkg/engine/funcs.go defines them
// (include, tpl, required, toYaml, fromYaml, toJson; no lookup: no cluster).
// Values are the chart's values.yaml coalesced with OVERRIDES (maps merged,
// everything else replaced), as Helm coalesces a -f file; NOTES.txt and
// _*.tpl are not rendered as manifests.
//
//	helmrender CHART_DIR RELEASE NAMESPACE [OVERRIDES.json] > manifests.yaml
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	"github.com/ghodss/yaml"
)

func die(format string, a ...interface{}) {
	fmt.Fprintf(os.Stderr, "helmrender: "+format+"\n", a...)
	os.Exit(1)
}

// coalesce merges src into dst: maps recursively, everything else replaced.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = coalesce(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// Helm's functions on top of sprig (pkg/engine/funcs.go), minus lookup.
func funcMap(t *template.Template, includedNames map[string]int) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = func(v interface{}) string {
		data, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(data), "\n")
	}
	f["fromYaml"] = func(str string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := yaml.Unmarshal([]byte(str), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["toJson"] = func(v interface{}) string {
		data, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		return string(data)
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		if includedNames[name] > 1000 {
			return "", fmt.Errorf("rendering template has a nested reference name: %s", name)
		}
		includedNames[name]++
		var buf strings.Builder
		err := t.ExecuteTemplate(&buf, name, data)
		includedNames[name]--
		return buf.String(), err
	}
	f["tpl"] = func(tpl string, vals interface{}) (string, error) {
		clone, err := t.Clone()
		if err != nil {
			return "", err
		}
		clone, err = clone.New("tpl").Parse(tpl)
		if err != nil {
			return "", err
		}
		var buf strings.Builder
		err = clone.Execute(&buf, vals)
		return buf.String(), err
	}
	f["required"] = func(warn string, val interface{}) (interface{}, error) {
		if val == nil || val == "" {
			return val, fmt.Errorf(warn)
		}
		return val, nil
	}
	return f
}

func readYaml(path string) map[string]interface{} {
	data, err := os.ReadFile(path)
	if err != nil {
		die("%v", err)
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(data, &m); err != nil {
		die("%s: %v", path, err)
	}
	return m
}

func main() {
	if len(os.Args) < 4 {
		die("usage: helmrender CHART_DIR RELEASE NAMESPACE [OVERRIDES.json]")
	}
	chartDir, release, namespace := os.Args[1], os.Args[2], os.Args[3]
	chart := readYaml(filepath.Join(chartDir, "Chart.yaml"))
	values := readYaml(filepath.Join(chartDir, "values.yaml"))
	if len(os.Args) > 4 {
		values = coalesce(values, readYaml(os.Args[4]))
	}
	top := map[string]interface{}{
		"Values": values,
		"Release": map[string]interface{}{"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1},
		"Chart": map[string]interface{}{"Name": chart["name"], "Version": chart["version"],
			"AppVersion": chart["appVersion"]},
		"Capabilities": map[string]interface{}{"KubeVersion": map[string]interface{}{"Version": "v1.30.0"}},
	}
	files, _ := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	sort.Strings(files)
	t := template.New("chart")
	included := map[string]int{}
	t.Funcs(funcMap(t, included)).Option("missingkey=zero")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			die("%v", err)
		}
		if _, err := t.New(filepath.Base(file)).Parse(string(data)); err != nil {
			die("%v", err)
		}
	}
	var out bytes.Buffer
	for _, file := range files {
		name := filepath.Base(file)
		if strings.HasPrefix(name, "_") || strings.HasSuffix(name, ".txt") {
			continue
		}
		var buf strings.Builder
		if err := t.ExecuteTemplate(&buf, name, top); err != nil {
			die("%v", err)
		}
		if strings.TrimSpace(buf.String()) == "" {
			continue
		}
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, buf.String())
	}
	os.Stdout.Write(out.Bytes())
}
