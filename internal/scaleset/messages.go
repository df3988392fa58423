// Messages of a scale set's queue. A message is an envelope {messageId, messageType
// "RunnerScaleSetJobMessages", body, statistics} whose body is a JSON string holding an array of job
// messages, each with a messageType: JobAvailable (a job wants a runner of the scale set; acquire it
// to serve it), JobAssigned (the service gave a job to the scale set: on github.com without any
// acquisition, on GHES after it), JobStarted (a runner of the scale set took it) and JobCompleted
// (it ended; the runner is removed; result "canceled" without a runner when no runner took an
// assignment in time, after which github.com assigns the job again: actions/scaleset README,
// "Job Reassignment"). A message carries up to 50 job messages. Jobs are identified by jobId:
// github.com sends runnerRequestId 0 (cloudbase/garm#459), which only acquisition needs (Key).
// Only JobAvailable and JobAssigned carry a reliable queue time (ARC found JobStarted's empty).
//
// Parsing never fails as a whole: what cannot be read is reported in Problems, next to what could,
// so a listener can count it, delete the message and carry on.

package scaleset

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"
)

// Job message types.
const (
	JobAvailable = "JobAvailable"
	JobAssigned  = "JobAssigned"
	JobStarted   = "JobStarted"
	JobCompleted = "JobCompleted"
)

// MessageTypeJobMessages is the envelope type of job message batches.
const MessageTypeJobMessages = "RunnerScaleSetJobMessages"

// JobMessage is one job message; which fields are set depends on Type.
type JobMessage struct {
	Type               string    `json:"messageType"`
	RunnerRequestID    int64     `json:"runnerRequestId"`
	RepositoryName     string    `json:"repositoryName"`
	OwnerName          string    `json:"ownerName"`
	JobID              string    `json:"jobId"`
	JobWorkflowRef     string    `json:"jobWorkflowRef"`
	JobDisplayName     string    `json:"jobDisplayName"`
	WorkflowRunID      int64     `json:"workflowRunId"`
	EventName          string    `json:"eventName"`
	RequestLabels      []string  `json:"requestLabels"`
	QueueTime          time.Time `json:"queueTime"`
	ScaleSetAssignTime time.Time `json:"scaleSetAssignTime"`
	RunnerAssignTime   time.Time `json:"runnerAssignTime"`
	FinishTime         time.Time `json:"finishTime"`
	// JobAvailable
	AcquireJobURL string `json:"acquireJobUrl,omitempty"`
	// JobStarted, JobCompleted
	RunnerID   int64  `json:"runnerId,omitempty"`
	RunnerName string `json:"runnerName,omitempty"`
	// JobCompleted
	Result string `json:"result,omitempty"`
}

// Message is one message of the queue, parsed.
type Message struct {
	ID         int64
	Type       string
	Statistics *Statistic
	Jobs       []JobMessage
	// Problems lists what could not be read: a malformed envelope or body, unknown message types,
	// job messages of an unknown type or with bad fields.
	Problems []error
}

type envelope struct {
	MessageID   int64      `json:"messageId"`
	MessageType string     `json:"messageType"`
	Body        string     `json:"body"`
	Statistics  *Statistic `json:"statistics"`
}

// EncodeMessage renders a message the way the service sends it (for the fake and tests).
func EncodeMessage(id int64, stats Statistic, jobs []JobMessage) ([]byte, error) {
	body, err := json.Marshal(jobs)
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{MessageID: id, MessageType: MessageTypeJobMessages, Body: string(body), Statistics: &stats})
}

// ParseMessage reads a message; see the package's note on Problems.
func ParseMessage(b []byte) *Message {
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		m := &Message{Problems: []error{fmt.Errorf("malformed message: %w", err)}}
		var id struct {
			MessageID int64 `json:"messageId"`
		}
		if json.Unmarshal(b, &id) == nil {
			m.ID = id.MessageID
		}
		return m
	}
	m := &Message{ID: env.MessageID, Type: env.MessageType, Statistics: env.Statistics}
	if env.MessageType != MessageTypeJobMessages {
		m.Problems = append(m.Problems, fmt.Errorf("message %d: unknown message type %q", env.MessageID, env.MessageType))
		return m
	}
	if env.Body == "" {
		return m
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(env.Body), &raws); err != nil {
		m.Problems = append(m.Problems, fmt.Errorf("message %d: malformed body: %w", env.MessageID, err))
		return m
	}
	for i, raw := range raws {
		var j JobMessage
		if err := json.Unmarshal(raw, &j); err != nil {
			m.Problems = append(m.Problems, fmt.Errorf("message %d: job message %d: %w", env.MessageID, i, err))
			continue
		}
		if err := j.check(); err != nil {
			m.Problems = append(m.Problems, fmt.Errorf("message %d: job message %d: %w", env.MessageID, i, err))
			continue
		}
		m.Jobs = append(m.Jobs, j)
	}
	return m
}

// check refuses job messages of unknown type or without the fields a listener acts on.
func (j JobMessage) check() error {
	switch j.Type {
	case JobAvailable, JobAssigned, JobStarted, JobCompleted:
	default:
		return fmt.Errorf("unknown job message type %q", j.Type)
	}
	switch {
	case j.RunnerRequestID < 0:
		return fmt.Errorf("%s with a negative runner request id", j.Type)
	case j.JobID == "" && j.RunnerRequestID == 0:
		return fmt.Errorf("%s without a job id or runner request id", j.Type)
	case j.Type == JobAvailable && j.RunnerRequestID == 0:
		return fmt.Errorf("%s without a runner request id to acquire it with", j.Type)
	case len(j.JobID) > 128 || strings.ContainsFunc(j.JobID, func(r rune) bool { return r <= ' ' || r > '~' }):
		return fmt.Errorf("%s with a job id that is not up to 128 printable characters", j.Type)
	}
	return nil
}

// Number is the job's number in logs and pool jobs: its runner request id, or, when github.com
// sends 0, a stable positive number drawn from its jobId (FNV-1a, 63 bits).
func (j JobMessage) Number() int64 {
	if j.RunnerRequestID > 0 {
		return j.RunnerRequestID
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(j.JobID))
	return max(int64(h.Sum64()>>1), 1)
}

// Key identifies the job across its messages: its jobId, or its runner request id when it has
// none (the older shape).
func (j JobMessage) Key() string {
	if j.JobID != "" {
		return j.JobID
	}
	return "r" + strconv.FormatInt(j.RunnerRequestID, 10)
}

// Workflow is the job's workflow file as the autoscaler learns fan-outs by: jobWorkflowRef
// ("owner/repo/.github/workflows/ci.yml@refs/heads/main", actions/scaleset's JobMessageBase)
// without its ref and its repository, which the job names apart; "" when the message has none.
func (j JobMessage) Workflow() string {
	path, _, _ := strings.Cut(j.JobWorkflowRef, "@")
	return strings.TrimPrefix(path, j.OwnerName+"/"+j.RepositoryName+"/")
}
