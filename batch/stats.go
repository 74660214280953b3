package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// apiStats reads a job's request counts and job-level error with a plain
// GET of batches/{id}: the genai SDK drops metadata.batchStats and the
// operation's error on the Gemini API backend. The counts are int64s sent
// as strings.
func (d *Driver) apiStats(ctx context.Context, api *genai.Client, name string) (pipeline.BatchCounts, string, error) {
	resp, err := plainGet(ctx, api, name)
	if err != nil {
		return pipeline.BatchCounts{}, "", err
	}
	defer resp.Body.Close()
	var op struct {
		Metadata struct {
			BatchStats struct {
				RequestCount           string `json:"requestCount"`
				SuccessfulRequestCount string `json:"successfulRequestCount"`
				FailedRequestCount     string `json:"failedRequestCount"`
				PendingRequestCount    string `json:"pendingRequestCount"`
			} `json:"batchStats"`
		} `json:"metadata"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	// The answer of a finished inlined job holds every response: the
	// counts are at the start, but the whole object must be read.
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&op); err != nil {
		return pipeline.BatchCounts{}, "", fmt.Errorf("GET %s: %w", name, err)
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	bs := op.Metadata.BatchStats
	c := pipeline.BatchCounts{Requests: n(bs.RequestCount), Succeeded: n(bs.SuccessfulRequestCount), Failed: n(bs.FailedRequestCount), Pending: n(bs.PendingRequestCount)}
	msg := ""
	if op.Error != nil {
		msg = fmt.Sprintf("%s (code %d)", op.Error.Message, op.Error.Code)
	}
	return c, msg, nil
}

// plainGet GETs path (under the API version) through api's own HTTP
// client, base URL and key, and fails on any status but 2xx, naming it
// and the start of the body.
func plainGet(ctx context.Context, api *genai.Client, path string) (*http.Response, error) {
	cc := api.ClientConfig()
	base := strings.TrimRight(cc.HTTPOptions.BaseURL, "/")
	version := cc.HTTPOptions.APIVersion
	if version == "" {
		version = "v1beta"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/"+version+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Goog-Api-Key", cc.APIKey)
	client := cc.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, bytes.TrimSpace(body))
	}
	return resp, nil
}

// download reads a results file whole. The SDK's Files.Download hands
// back any body whatever the status, so a 503's error body would read as
// the file.
func download(ctx context.Context, api *genai.Client, fileName string) ([]byte, error) {
	resp, err := plainGet(ctx, api, "files/"+strings.TrimPrefix(fileName, "files/")+":download?alt=media")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}
