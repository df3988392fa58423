// The message session: one per scale set at the service. Creating a second answers 409; the
// holder long-polls its message queue (GetMessage, about 50 s), deletes each message once handled
// (an undeleted message is delivered again), and acquires the jobs it will serve. The queue calls
// carry the session's message queue token; when it expires the queue answers 401 and the session is
// refreshed (PATCH) for a new one.

package scaleset

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Session is a message session.
type Session struct {
	SessionID               string     `json:"sessionId,omitempty"`
	OwnerName               string     `json:"ownerName,omitempty"`
	RunnerScaleSet          *ScaleSet  `json:"runnerScaleSet,omitempty"`
	MessageQueueURL         string     `json:"messageQueueUrl,omitempty"`
	MessageQueueAccessToken string     `json:"messageQueueAccessToken,omitempty"`
	Statistics              *Statistic `json:"statistics,omitempty"`
}

// Errors of the session and its queue.
var (
	// ErrSessionConflict: another session holds the scale set (409).
	ErrSessionConflict = errors.New("another message session holds the scale set")
	// ErrQueueTokenExpired: the message queue token expired (401); refresh the session.
	ErrQueueTokenExpired = errors.New("message queue token expired")
	// ErrSessionGone: the session no longer exists at the service (404); create a new one.
	ErrSessionGone = errors.New("message session no longer exists")
)

func sessionPath(scaleSetID int64, sessionID string) string {
	p := fmt.Sprintf("%s/%d/sessions", scaleSetsPath, scaleSetID)
	if sessionID != "" {
		p += "/" + url.PathEscape(sessionID)
	}
	return p
}

// CreateSession opens the scale set's message session; owner names this holder (shown at the
// service). ErrSessionConflict when another session holds it.
func (c *Client) CreateSession(ctx context.Context, scaleSetID int64, owner string) (Session, error) {
	var s Session
	err := c.call(ctx, fmt.Sprintf("create session of scale set %d", scaleSetID), http.MethodPost, sessionPath(scaleSetID, ""), nil, Session{OwnerName: owner}, http.StatusOK, &s)
	if StatusOf(err) == http.StatusConflict {
		return Session{}, fmt.Errorf("%w: %w", ErrSessionConflict, err)
	}
	if err == nil && (s.SessionID == "" || s.MessageQueueURL == "" || s.MessageQueueAccessToken == "") {
		return Session{}, fmt.Errorf("create session of scale set %d: answer without session id, queue url or token", scaleSetID)
	}
	return s, err
}

// RefreshSession renews the session's message queue token. ErrSessionGone when the service no
// longer knows the session (404, actions/scaleset#123): open a new one.
func (c *Client) RefreshSession(ctx context.Context, scaleSetID int64, sessionID string) (Session, error) {
	var s Session
	err := c.call(ctx, "refresh session "+sessionID, http.MethodPatch, sessionPath(scaleSetID, sessionID), nil, nil, http.StatusOK, &s)
	if StatusOf(err) == http.StatusNotFound {
		return Session{}, fmt.Errorf("%w: %w", ErrSessionGone, err)
	}
	return s, err
}

// DeleteSession ends a session (of this holder, or one a dead holder left). A session the service
// no longer knows is not an error: the service answers 400 RunnerScaleSetSessionExpiredException
// for an expired or unknown one (actions/actions-runner-controller#4285), 404 where it forgot the
// scale set's sessions altogether.
func (c *Client) DeleteSession(ctx context.Context, scaleSetID int64, sessionID string) error {
	err := c.call(ctx, "delete session "+sessionID, http.MethodDelete, sessionPath(scaleSetID, sessionID), nil, nil, http.StatusNoContent, nil)
	if s := StatusOf(err); s == http.StatusNotFound || s == http.StatusBadRequest {
		return nil
	}
	return err
}

// queueError maps the queue's statuses to the session errors.
func queueError(err error) error {
	switch StatusOf(err) {
	case http.StatusUnauthorized:
		return fmt.Errorf("%w: %w", ErrQueueTokenExpired, err)
	case http.StatusNotFound:
		return fmt.Errorf("%w: %w", ErrSessionGone, err)
	}
	return err
}

// GetMessage long-polls the session's queue for the first message after lastMessageID (0: the
// oldest undeleted one). maxCapacity is how many more runners the listener can bring up. nil, nil
// when the poll ended without a message (202).
func (c *Client) GetMessage(ctx context.Context, s Session, lastMessageID int64, maxCapacity int) (*Message, error) {
	u, err := url.Parse(s.MessageQueueURL)
	if err != nil {
		return nil, fmt.Errorf("message queue url: %w", err)
	}
	if lastMessageID > 0 {
		q := u.Query()
		q.Set("lastMessageId", strconv.FormatInt(lastMessageID, 10))
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json; api-version="+APIVersion)
	req.Header.Set("Authorization", "Bearer "+s.MessageQueueAccessToken)
	req.Header.Set(HeaderMaxCapacity, strconv.Itoa(max(maxCapacity, 0)))
	status, body, err := c.send(req, "get message", http.StatusOK, http.StatusAccepted)
	if err != nil {
		return nil, queueError(err)
	}
	if status == http.StatusAccepted {
		return nil, nil // nothing came in time
	}
	return ParseMessage(body), nil
}

// DeleteMessage deletes a handled message from the queue.
func (c *Client) DeleteMessage(ctx context.Context, s Session, messageID int64) error {
	u, err := url.Parse(s.MessageQueueURL)
	if err != nil {
		return fmt.Errorf("message queue url: %w", err)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/" + strconv.FormatInt(messageID, 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.MessageQueueAccessToken)
	return queueError(c.do(req, fmt.Sprintf("delete message %d", messageID), []int{http.StatusNoContent}, nil))
}

// AcquireJobs asks for the jobs (runner request ids) the listener will serve and returns those it
// got. It authenticates with the session's queue token.
func (c *Client) AcquireJobs(ctx context.Context, s Session, scaleSetID int64, requestIDs []int64) ([]int64, error) {
	req, err := c.serviceRequest(ctx, http.MethodPost, fmt.Sprintf("%s/%d/acquirejobs", scaleSetsPath, scaleSetID), nil, requestIDs)
	if err != nil {
		return nil, fmt.Errorf("acquire jobs: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+s.MessageQueueAccessToken)
	var out list[int64]
	if err := c.do(req, "acquire jobs", []int{http.StatusOK}, &out); err != nil {
		return nil, queueError(err)
	}
	return out.Value, nil
}
