// Tests of the local stack: the real SDK clients against DynamoDB Local and fauxqs, the clear errors
// for a taken port and a missing java, and that Close leaves no child process behind.
package stack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
	"github.com/runnerpool/terraform-provider-runnerpool/test/stack/stacktest"
)

func TestMain(m *testing.M) { stacktest.Main(m) }

func TestDynamoDB(t *testing.T) {
	t.Parallel()
	st := stacktest.Shared(t)
	ctx := t.Context()
	db := st.DynamoDB()
	table := stacktest.UniqueName(t, "state")

	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 30*time.Second); err != nil {
		t.Fatalf("waiting for the table: %v", err)
	}

	put := func(state string) error {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]ddbtypes.AttributeValue{
				"id":    &ddbtypes.AttributeValueMemberS{Value: "i-0123456789abcdef0"},
				"state": &ddbtypes.AttributeValueMemberS{Value: state},
			},
			ConditionExpression: aws.String("attribute_not_exists(id)"),
		})
		return err
	}
	if err := put("created"); err != nil {
		t.Fatalf("first conditional PutItem: %v", err)
	}
	err = put("running")
	var ccf *ddbtypes.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("second conditional PutItem: got %v, want *types.ConditionalCheckFailedException", err)
	}

	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "i-0123456789abcdef0"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatalf("GetItem: %v", err)
	}
	if got, ok := out.Item["state"].(*ddbtypes.AttributeValueMemberS); !ok || got.Value != "created" {
		t.Errorf("GetItem state = %#v, want created (the failed put must not have written)", out.Item["state"])
	}

	// A client made the plain way from AWSConfig reaches the stack too.
	cfg, err := st.AWSConfig(ctx)
	if err != nil {
		t.Fatalf("AWSConfig: %v", err)
	}
	if _, err := dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}); err != nil {
		t.Errorf("DescribeTable with a client from AWSConfig: %v", err)
	}
}

func TestSQS(t *testing.T) {
	t.Parallel()
	st := stacktest.Shared(t)
	ctx := t.Context()
	q := st.SQS()

	created, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stacktest.UniqueName(t, "pool"))})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	url := created.QueueUrl
	t.Cleanup(func() { _, _ = q.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: url}) })

	sent := time.Now()
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: url, MessageBody: aws.String("i-0123456789abcdef0"), DelaySeconds: 1}); err != nil {
		t.Fatalf("SendMessage: %v", err)
	}
	early, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 0})
	if err != nil {
		t.Fatalf("ReceiveMessage (during the delay): %v", err)
	}
	if len(early.Messages) != 0 && time.Since(sent) < 900*time.Millisecond {
		t.Fatalf("a message sent with DelaySeconds=1 was received at once")
	}

	got, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: url, WaitTimeSeconds: 5, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	if len(got.Messages) != 1 || aws.ToString(got.Messages[0].Body) != "i-0123456789abcdef0" {
		t.Fatalf("ReceiveMessage = %d messages %+v, want the one sent", len(got.Messages), got.Messages)
	}
	if waited := time.Since(sent); waited < 900*time.Millisecond {
		t.Errorf("message delayed by 1s arrived after %s", waited)
	}
	if _, err := q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: url, ReceiptHandle: got.Messages[0].ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameAll}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	for _, a := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"} {
		if v := attrs.Attributes[a]; v != "0" {
			t.Errorf("after DeleteMessage %s = %q, want 0", a, v)
		}
	}
}

// TestStartAndClose starts a stack of its own, checks every endpoint, and checks that Close leaves
// no emulator process behind. It logs how long the start took.
func TestStartAndClose(t *testing.T) {
	t.Parallel()
	began := time.Now()
	st, err := stack.Start(t.Context(), stack.Options{})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("stack started in %s", time.Since(began).Round(time.Millisecond))
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = st.Close()
		}
	})

	env := st.Env()
	wantNames := []string{stack.EnvDynamoDB, stack.EnvSQS, stack.EnvEC2, stack.EnvGitHubAPI, stack.EnvOIDCIssuer}
	for i, name := range wantNames {
		k, v, _ := strings.Cut(env[i], "=")
		if k != name || !strings.HasPrefix(v, "http://127.0.0.1:") {
			t.Errorf("Env()[%d] = %q, want %s=http://127.0.0.1:PORT", i, env[i], name)
		}
	}
	if st.EC2 == nil || st.GitHub == nil || st.OIDC == nil {
		t.Errorf("in-process servers missing: EC2 %v, GitHub %v, OIDC %v", st.EC2 != nil, st.GitHub != nil, st.OIDC != nil)
	}
	for name, endpoint := range map[string]string{"EC2": st.Endpoints.EC2, "GitHub": st.Endpoints.GitHubAPI, "OIDC": st.Endpoints.OIDCIssuer, "S3": st.Endpoints.S3} {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "http://"), time.Second)
		if err != nil {
			t.Errorf("%s server at %s: %v", name, endpoint, err)
			continue
		}
		_ = conn.Close()
	}

	// The issuer was built with the URL it is served on.
	resp, err := http.Get(st.Endpoints.OIDCIssuer + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatalf("OIDC discovery: %v", err)
	}
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	err = json.NewDecoder(resp.Body).Decode(&discovery)
	_ = resp.Body.Close()
	if err != nil || discovery.Issuer != st.Endpoints.OIDCIssuer {
		t.Errorf("OIDC discovery issuer = %q (%v), want %q", discovery.Issuer, err, st.Endpoints.OIDCIssuer)
	}

	ddbPort, sqsPort := port(t, st.Endpoints.DynamoDB), port(t, st.Endpoints.SQS)
	if n := len(stacktest.EmulatorProcesses(ddbPort, sqsPort)); n != 2 {
		t.Fatalf("found %d emulator processes before Close, want 2 (the /proc scan is broken)", n)
	}
	if _, err := st.DynamoDB().ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Errorf("ListTables: %v", err)
	}
	if _, err := st.EC2Client().DescribeInstances(t.Context(), &ec2.DescribeInstancesInput{}); err != nil {
		t.Errorf("DescribeInstances on the EC2 server: %v", err)
	}

	// Both emulators booted (a JVM and node): each has used CPU, and the figure only grows.
	cpu, err := st.ChildCPU()
	if err != nil || cpu["DynamoDB Local"] <= 0 || cpu["fauxqs"] <= 0 || len(cpu) != 2 {
		t.Errorf("ChildCPU = %v, %v; want DynamoDB Local and fauxqs, each above zero", cpu, err)
	}
	if again, err := st.ChildCPU(); err != nil || again["DynamoDB Local"] < cpu["DynamoDB Local"] {
		t.Errorf("ChildCPU again = %v, %v; want no less than %v", again, err, cpu)
	}

	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	if left := stacktest.EmulatorProcesses(ddbPort, sqsPort); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-st.Done():
		t.Errorf("Done closed by Close: %v", st.Err())
	default:
	}
}

func TestStartPortInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		set   func(*stack.Ports, int)
		label string
	}{
		{"dynamodb", func(p *stack.Ports, n int) { p.DynamoDB = n }, "DynamoDB Local"},
		{"sqs", func(p *stack.Ports, n int) { p.SQS = n }, "fauxqs"},
		{"ec2", func(p *stack.Ports, n int) { p.EC2 = n }, "the EC2 server"},
		{"github", func(p *stack.Ports, n int) { p.GitHubAPI = n }, "the GitHub fake"},
		{"oidc", func(p *stack.Ports, n int) { p.OIDCIssuer = n }, "the OIDC issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			taken := lis.Addr().(*net.TCPAddr).Port
			var opts stack.Options
			tc.set(&opts.Ports, taken)

			st, err := stack.Start(t.Context(), opts)
			if err == nil {
				_ = st.Close()
				t.Fatalf("Start with port %d taken: no error", taken)
			}
			want := fmt.Sprintf("port %d for %s is already in use", taken, tc.label)
			if err.Error() != want {
				t.Errorf("Start error = %q, want %q", err, want)
			}
		})
	}
}

func TestStartSamePortTwice(t *testing.T) {
	t.Parallel()
	_, err := stack.Start(t.Context(), stack.Options{Ports: stack.Ports{DynamoDB: 45678, EC2: 45678}})
	if err == nil || !strings.Contains(err.Error(), "port 45678 is given for both DynamoDB Local and the EC2 server") {
		t.Errorf("Start error = %v, want the port given twice", err)
	}
}

// TestStartWithoutJava cannot run in parallel: it empties PATH.
func TestStartWithoutJava(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := stack.Start(t.Context(), stack.Options{})
	const want = "java not found on PATH: run make deps (installs openjdk-17-jre-headless)"
	if err == nil || err.Error() != want {
		t.Errorf("Start error = %v, want %q", err, want)
	}
}

func TestStartWithoutNodeModules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := stack.Start(t.Context(), stack.Options{NodeDir: dir})
	if err == nil || !strings.HasSuffix(err.Error(), ": run make deps") || !strings.Contains(err.Error(), "node_modules") {
		t.Errorf("Start error = %v, want node_modules missing: run make deps", err)
	}
}

func TestFromEnv(t *testing.T) {
	vars := []string{stack.EnvDynamoDB, stack.EnvSQS, stack.EnvEC2, stack.EnvGitHubAPI, stack.EnvOIDCIssuer}
	// The S3 endpoint is optional (a stack started before it had none), so it is cleared here too:
	// under make test the shared stack's AWS_ENDPOINT_URL_S3 is in the environment.
	for _, v := range append(vars, stack.EnvS3) {
		t.Setenv(v, "")
	}
	if st, err := stack.FromEnv(); st != nil || err != nil {
		t.Fatalf("FromEnv with nothing set = %v, %v; want nil, nil", st, err)
	}

	t.Setenv(stack.EnvDynamoDB, "http://127.0.0.1:1")
	if _, err := stack.FromEnv(); err == nil || !strings.Contains(err.Error(), stack.EnvSQS) {
		t.Errorf("FromEnv with one variable set: error %v, want the missing ones named", err)
	}

	for i, v := range append(vars, stack.EnvS3) {
		t.Setenv(v, "http://127.0.0.1:"+strconv.Itoa(i+1))
	}
	st, err := stack.FromEnv()
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	want := stack.Endpoints{DynamoDB: "http://127.0.0.1:1", SQS: "http://127.0.0.1:2", EC2: "http://127.0.0.1:3",
		GitHubAPI: "http://127.0.0.1:4", OIDCIssuer: "http://127.0.0.1:5", S3: "http://127.0.0.1:6"}
	if st.Endpoints != want {
		t.Errorf("Endpoints = %+v, want %+v", st.Endpoints, want)
	}
	if st.EC2 != nil || st.GitHub != nil || st.OIDC != nil {
		t.Errorf("a stack from the environment has in-process servers")
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got := st.Env()[:5]; strings.Join(got, " ") != "AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:1 AWS_ENDPOINT_URL_SQS=http://127.0.0.1:2 "+
		"AWS_ENDPOINT_URL_EC2=http://127.0.0.1:3 RUNNERPOOL_GITHUB_API_URL=http://127.0.0.1:4 RUNNERPOOL_OIDC_ISSUER=http://127.0.0.1:5" {
		t.Errorf("Env = %q", got)
	}

	t.Setenv(stack.EnvEC2, "127.0.0.1:3")
	if _, err := stack.FromEnv(); err == nil {
		t.Errorf("FromEnv accepted an endpoint without scheme")
	}
}

func port(t *testing.T, endpoint string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "http://"))
	if err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("endpoint %q: %v", endpoint, err)
	}
	return n
}

func TestStartChildFails(t *testing.T) {
	t.Parallel()
	fakeJava := filepath.Join(t.TempDir(), "java")
	script := "#!/bin/sh\necho 'Error: Could not reserve enough space for object heap' >&2\nexit 3\n"
	if err := os.WriteFile(fakeJava, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := stack.Start(t.Context(), stack.Options{Java: fakeJava})
	want := "DynamoDB Local exited before it was ready (exit status 3); last output of DynamoDB Local:\n" +
		"Error: Could not reserve enough space for object heap"
	if err == nil || err.Error() != want {
		t.Errorf("Start error = %v, want %q", err, want)
	}
}
