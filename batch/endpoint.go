package batch

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/genai"
)

// A job is known only at the endpoint that created it: the driver keeps
// one client per endpoint its open jobs were created at.

// endpointKey is an API root URL as endpoints are compared.
func endpointKey(url string) string { return strings.TrimRight(url, "/") }

// dial makes a client for endpoint, where a job was created, when it is
// not the run's: a job is known only at the endpoint that created it, so
// a run resumed with another --base-url must still ask there (asked at
// the new one, every job would read 404 and be closed while the old one
// answers them). Idempotent.
func (d *Driver) dial(ctx context.Context, endpoint string) error {
	key := endpointKey(endpoint)
	if _, ok := d.clients[key]; ok || key == "" || key == endpointKey(d.api.ClientConfig().HTTPOptions.BaseURL) {
		return nil
	}
	cc := d.api.ClientConfig()
	c, err := genai.NewClient(ctx, &genai.ClientConfig{APIKey: cc.APIKey, Backend: cc.Backend, HTTPClient: cc.HTTPClient,
		HTTPOptions: genai.HTTPOptions{BaseURL: endpoint, APIVersion: cc.HTTPOptions.APIVersion, RetryOptions: cc.HTTPOptions.RetryOptions}})
	if err != nil {
		return fmt.Errorf("a client for %s, where open batch jobs were created: %w", endpoint, err)
	}
	d.clients[key] = c
	d.cfg.Log.Info("batch: open jobs were created at another endpoint than this run's; asking them there", "endpoint", endpoint, "run", cc.HTTPOptions.BaseURL)
	return nil
}

// apiFor is the client for job t: the endpoint's it was created at.
func (d *Driver) apiFor(t *tracked) *genai.Client {
	if c, ok := d.clients[endpointKey(t.job.Endpoint)]; ok {
		return c
	}
	return d.api
}

// listByDisplayName reads every job the API lists.
func (d *Driver) listByDisplayName(ctx context.Context, api *genai.Client) (map[string][]*genai.BatchJob, error) {
	out := map[string][]*genai.BatchJob{}
	for j, err := range api.Batches.All(ctx) {
		if err != nil {
			return nil, fmt.Errorf("list batch jobs to re-attach one created before a crash: %w (sawtooth will not create a job it cannot rule out having created; run again when the API answers)", err)
		}
		out[j.DisplayName] = append(out[j.DisplayName], j)
	}
	return out, nil
}
