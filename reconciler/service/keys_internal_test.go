package service

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/runnerpool/terraform-provider-runnerpool/reconciler/config"
)

// fakeSTS answers GetCallerIdentity and counts the calls.
type fakeSTS struct {
	account string
	err     error
	calls   int
}

func (f *fakeSTS) GetCallerIdentity(context.Context, *sts.GetCallerIdentityInput, ...func(*sts.Options)) (*sts.GetCallerIdentityOutput, error) {
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	return &sts.GetCallerIdentityOutput{Account: aws.String(f.account)}, nil
}

func TestInstanceKeyPrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		keys, account string
		region        string
		sts           *fakeSTS
		want, wantErr string
		wantCalls     int
	}{
		{name: "id keys", keys: config.InstanceKeysID, region: "eu-west-1", sts: &fakeSTS{}, want: ""},
		{name: "arn with the account given", keys: config.InstanceKeysARN, account: "111122223333", region: "eu-west-1", sts: &fakeSTS{},
			want: "arn:aws:ec2:eu-west-1:111122223333:instance/"},
		{name: "arn with the account from STS", keys: config.InstanceKeysARN, region: "cn-north-1", sts: &fakeSTS{account: "444455556666"},
			want: "arn:aws-cn:ec2:cn-north-1:444455556666:instance/", wantCalls: 1},
		{name: "STS fails", keys: config.InstanceKeysARN, region: "us-east-1", sts: &fakeSTS{err: errors.New("no route to host")},
			wantErr: "RUNNERPOOL_AWS_ACCOUNT_ID", wantCalls: 1},
		{name: "STS answers no account", keys: config.InstanceKeysARN, region: "us-east-1", sts: &fakeSTS{}, wantErr: "no account", wantCalls: 1},
		{name: "no region", keys: config.InstanceKeysARN, account: "111122223333", sts: &fakeSTS{}, wantErr: "AWS_REGION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := instanceKeyPrefix(t.Context(), config.Config{InstanceKeys: tt.keys, AWSAccountID: tt.account}, aws.Config{Region: tt.region}, tt.sts)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error = %v, want one mentioning %q", err, tt.wantErr)
			case tt.wantErr == "" && (err != nil || got != tt.want):
				t.Errorf("prefix = %q, %v; want %q", got, err, tt.want)
			}
			if tt.sts.calls != tt.wantCalls {
				t.Errorf("%d STS calls, want %d", tt.sts.calls, tt.wantCalls)
			}
		})
	}
}
