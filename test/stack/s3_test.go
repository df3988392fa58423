package stack_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/runnerpool/terraform-provider-runnerpool/test/stack"
)

// TestS3HoldsTheCacheBucket: the stack's S3 answers the real SDK (path-style, as the cache's
// presigner addresses it) with the cache bucket present from the start.
func TestS3HoldsTheCacheBucket(t *testing.T) {
	h, err := stack.NewS3()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := s3.New(s3.Options{Region: stack.Region, BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(stack.AccessKeyID, stack.SecretAccessKey, "")})
	ctx := context.Background()
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(stack.CacheBucket), Key: aws.String("v1/a/b"),
		Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	out, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(stack.CacheBucket), Prefix: aws.String("v1/")})
	if err != nil || len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "v1/a/b" {
		t.Fatalf("listing the cache bucket: %v, %+v", err, out)
	}
}
