// k3srender: what k3s (and RKE2, which runs k3s's agent code) does with
// containerd's config at every start, for the tests (there is no k3s here):
// pkg/agent/containerd/config.go picks DIR/config-v3.toml.tmpl, else
// DIR/config.toml.tmpl, else its built-in template; pkg/agent/templates
// parses the user's template as "compiled_template" with k3s's own default
// defined as the template "base", executes it with the node's config and
// writes DIR/config.toml. BASE_FILE stands in for k3s's built-in template
// (k3s's has the node's paths; the tests' has their private containerd's).
//
//	k3srender DIR BASE_FILE
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"text/template"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: k3srender DIR BASE_FILE")
		os.Exit(2)
	}
	dir := os.Args[1]
	base, err := os.ReadFile(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "k3srender:", err)
		os.Exit(1)
	}
	user := string(base)
	for _, name := range []string{"config-v3.toml.tmpl", "config.toml.tmpl"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			fmt.Fprintln(os.Stderr, "k3srender: using containerd config template at", filepath.Join(dir, name))
			user = string(b)
			break
		} else if !os.IsNotExist(err) {
			fmt.Fprintln(os.Stderr, "k3srender:", err)
			os.Exit(1)
		}
	}
	t, err := template.New("compiled_template").Parse(user)
	if err == nil {
		_, err = t.New("base").Parse(string(base))
	}
	var out bytes.Buffer
	if err == nil {
		err = t.Execute(&out, map[string]interface{}{"Program": "k3s"})
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "config.toml"), out.Bytes(), 0600)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "k3srender:", err)
		os.Exit(1)
	}
}
