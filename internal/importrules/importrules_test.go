package importrules

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the repository root, relative to this package's directory (where go test runs).
const moduleRoot = "../.."

// ourModule is the module path of the repository.
const ourModule = "github.com/gantry-dev/gantry"

// goPackage is what the tests read of `go list` for one package.
type goPackage struct {
	importPath string
	standard   bool
	module     string
	imports    []string
}

// goList runs `go list -deps?` on patterns from the module root.
func goList(t *testing.T, deps bool, patterns ...string) []goPackage {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}|{{.Standard}}|{{with .Module}}{{.Path}}{{end}}|{{join .Imports \" \"}}"}
	if deps {
		args = append(args, "-deps", "-test=false")
	}
	cmd := exec.Command("go", append(args, patterns...)...)
	cmd.Dir = moduleRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(cmd.Args[1:], " "), err)
	}
	var pkgs []goPackage
	for line := range strings.Lines(string(out)) {
		fields := strings.Split(strings.TrimSpace(line), "|")
		if len(fields) != 4 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkgs = append(pkgs, goPackage{
			importPath: fields[0], standard: fields[1] == "true", module: fields[2], imports: strings.Fields(fields[3]),
		})
	}
	return pkgs
}

// linkedTestPackages are the test packages the gantry binary links on purpose, with why.
var linkedTestPackages = map[string]string{
	ourModule + "/services/chat/slacktest": "the demo Slack workspace of -chat-demo: internal/stack serves slacktest.NewDemo, so chat can be tried without a Slack app",
	"net/http/httptest":                    "slacktest's demo workspace serves its fake Slack on an httptest.Server",
}

// TestNoTestPackageInTheBinary: a test helper linked into cmd/gantry ships fakes (and their
// dependencies) to every installation, and a fake answering in production is hard to notice.
func TestNoTestPackageInTheBinary(t *testing.T) {
	for _, pkg := range goList(t, true, "./cmd/gantry") {
		if !isTestPackage(pkg) {
			continue
		}
		if _, ok := linkedTestPackages[pkg.importPath]; !ok {
			t.Errorf("cmd/gantry links the test package %s (go list -deps ./cmd/gantry): import it from _test.go files only, or list it in linkedTestPackages with the reason", pkg.importPath)
		}
	}
}

// isTestPackage tells test code apart: a package under a "test" folder of any module (grpc's
// test/bufconn) or named testing or testutil; one of the standard library's or ours whose name
// ends in "test", the naming both follow (httptest, iotest; pkg/awstest, pkg/dynamotest,
// pkg/etcdtest, internal/stacktest, services/chat/slacktest), which would be too broad for other
// modules ("latest"); or any package that imports testing. The standard library's internal packages
// are left out: only it can import them (os imports internal/testlog, sync internal/synctest), so
// every Go binary has them.
func isTestPackage(pkg goPackage) bool {
	elems := strings.Split(pkg.importPath, "/")
	last := elems[len(elems)-1]
	switch {
	case pkg.standard && slices.Contains(elems, "internal"):
		return false
	case slices.Contains(elems, "test"), last == "testing", last == "testutil":
		return true
	case (pkg.standard || pkg.module == ourModule) && strings.HasSuffix(last, "test"):
		return true
	}
	return slices.Contains(pkg.imports, "testing")
}

func TestIsTestPackage(t *testing.T) {
	for _, c := range []struct {
		pkg  goPackage
		want bool
	}{
		{goPackage{importPath: "google.golang.org/grpc/test/bufconn", module: "google.golang.org/grpc"}, true},
		{goPackage{importPath: ourModule + "/pkg/awstest", module: ourModule}, true},
		{goPackage{importPath: ourModule + "/internal/stacktest", module: ourModule}, true},
		{goPackage{importPath: "net/http/httptest", standard: true}, true},
		{goPackage{importPath: "testing", standard: true}, true},
		{goPackage{importPath: "example.com/helper", module: "example.com", imports: []string{"fmt", "testing"}}, true},
		{goPackage{importPath: "internal/testlog", standard: true}, false},
		{goPackage{importPath: ourModule + "/pkg/testwait", module: ourModule}, false},
		{goPackage{importPath: ourModule + "/services/secrets", module: ourModule}, false},
		{goPackage{importPath: "example.com/latest", module: "example.com"}, false},
	} {
		if got := isTestPackage(c.pkg); got != c.want {
			t.Errorf("isTestPackage(%s) = %v, want %v", c.pkg.importPath, got, c.want)
		}
	}
}

// servicePackages keep the transport and the domain of one service in one package
// (ARCHITECTURE.md, Layout), so the rule "domain code imports neither grpc nor bbolt" (Anatomy of a
// service) is checked file by file there.
var servicePackages = []string{"services/secrets", "services/chat", "services/proxyadmin"}

// isTransportFile: the gRPC servers of a service package, the files that may import grpc.
func isTransportFile(name string) bool {
	return strings.HasPrefix(name, "server") || strings.HasPrefix(name, "adminserver")
}

// domainExceptions are the other files of the service packages that import grpc today, with why. The
// test fails for an entry whose file no longer does, so the list only shrinks.
var domainExceptions = map[string]string{
	"services/secrets/errors.go": "toStatus, the one place the domain's errors become gRPC status codes, beside the errors it maps",
	"services/chat/errors.go":    "toStatus, the one place the domain's errors become gRPC status codes, beside the errors it maps",
	"services/secrets/auth.go":   "authError carries the gRPC code of its refusal (codes.Unauthenticated, PermissionDenied, InvalidArgument)",
	"services/chat/tokens.go":    "the gRPC client of the secrets service, which chat reads its Slack tokens from and relays change requests with: outbound transport",
}

// domainPackages are domain as a whole: the storage contract of the secrets service and the stored
// form of its records, which the service and every adapter share.
var domainPackages = []string{"./services/secrets/store", "./services/secrets/store/codec"}

// isGRPCOrBbolt is the rule's subject: grpc and every package of its module, and bbolt.
func isGRPCOrBbolt(importPath string) bool {
	for _, root := range []string{"google.golang.org/grpc", "go.etcd.io/bbolt"} {
		if importPath == root || strings.HasPrefix(importPath, root+"/") {
			return true
		}
	}
	return false
}

func TestDomainImportsNeitherGRPCNorBbolt(t *testing.T) {
	excepted := map[string]bool{}
	for _, dir := range servicePackages {
		files, err := filepath.Glob(filepath.Join(moduleRoot, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no Go files in %s (%v)", dir, err)
		}
		for _, file := range files {
			name := filepath.Base(file)
			if strings.HasSuffix(name, "_test.go") || isTransportFile(name) {
				continue
			}
			rel := dir + "/" + name
			forbidden := slices.DeleteFunc(fileImports(t, file), func(p string) bool { return !isGRPCOrBbolt(p) })
			if _, ok := domainExceptions[rel]; ok {
				excepted[rel] = len(forbidden) > 0
				continue
			}
			if len(forbidden) > 0 {
				t.Errorf("%s is domain code (not server*.go or adminserver*.go) and imports %s: ARCHITECTURE.md says domain code imports neither grpc nor bbolt", rel, strings.Join(forbidden, ", "))
			}
		}
	}
	for rel, why := range domainExceptions {
		if !excepted[rel] {
			t.Errorf("domainExceptions lists %s (%s), which is gone or imports neither grpc nor bbolt any more: remove the entry", rel, why)
		}
	}
	for _, pkg := range goList(t, false, domainPackages...) {
		if forbidden := slices.DeleteFunc(pkg.imports, func(p string) bool { return !isGRPCOrBbolt(p) }); len(forbidden) > 0 {
			t.Errorf("%s is domain code and imports %s: ARCHITECTURE.md says domain code imports neither grpc nor bbolt", pkg.importPath, strings.Join(forbidden, ", "))
		}
	}
}

// fileImports returns the import paths of one Go file.
func fileImports(t *testing.T, file string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, spec := range f.Imports {
		p, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			t.Fatalf("%s: import %s: %v", file, spec.Path.Value, err)
		}
		paths = append(paths, p)
	}
	return paths
}
